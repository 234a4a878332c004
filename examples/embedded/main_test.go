package main

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestOnceRunsEveryInvoice runs the example's -once path: every invoice is
// booked or failed exactly once, and the Node leaves no goroutine behind.
func TestOnceRunsEveryInvoice(t *testing.T) {
	sum, err := run(true, "")
	if err != nil {
		t.Fatal(err)
	}
	// 10,000 invoices; ids 0, 2500, 5000 and 7500 carry a negative amount.
	if sum.success != 9996 || sum.failure != 4 {
		t.Fatalf("success=%d failure=%d, want 9996 and 4", sum.success, sum.failure)
	}
	if sum.ledgerEntries != 9996 || sum.duplicates != 0 {
		t.Fatalf("ledger entries=%d duplicates=%d, want 9996 and 0", sum.ledgerEntries, sum.duplicates)
	}
}
