package recipe

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/shardflow/shardflow/coord/store"
)

// Debts: a suspended session pays nothing and says what it owes; a
// connected one pays its debts in order, drops (and releases) those of
// another session, and keeps the rest from the first failure for the next
// Pay.
func TestDebts(t *testing.T) {
	ctx := t.Context()
	var d Debts
	kept := 0
	d.Kept = func() { kept++ }
	var paid []string
	failures := map[string]int{"b": 1} // b fails once (the connection cut again)
	pay := func(name string) func(context.Context) error {
		return func(context.Context) error {
			paid = append(paid, name)
			if failures[name] > 0 {
				failures[name]--
				return store.ErrConnectionLoss
			}
			return nil
		}
	}
	var released []string
	release := func(name string) func() { return func() { released = append(released, name) } }
	d.Owe(1, "a", pay("a"), release("a"))
	d.Owe(2, "x", pay("x"), release("x"))
	d.Owe(1, "b", pay("b"), nil)
	d.Owe(1, "c", pay("c"), release("c"))
	if kept != 4 {
		t.Fatalf("Kept called %d times for 4 debts", kept)
	}

	err := d.Pay(ctx, store.Session{ID: 1, State: store.StateSuspended})
	if !errors.Is(err, store.ErrConnectionLoss) || len(paid) != 0 {
		t.Fatalf("Pay on the suspended session: %v, paid %v; want ErrConnectionLoss and nothing paid", err, paid)
	}
	err = d.Pay(ctx, store.Session{ID: 1, State: store.StateConnected})
	if !errors.Is(err, store.ErrConnectionLoss) {
		t.Fatalf("Pay with b failing: %v, want b's error", err)
	}
	if want := []string{"a", "b"}; !slices.Equal(paid, want) {
		t.Fatalf("paid %v, want %v (x is another session's, c waits behind b)", paid, want)
	}
	if want := []string{"a", "x"}; !slices.Equal(released, want) {
		t.Fatalf("released %v, want %v (a paid, x dropped with its session)", released, want)
	}
	if err := d.Pay(ctx, store.Session{ID: 1, State: store.StateConnected}); err != nil {
		t.Fatalf("the next Pay: %v", err)
	}
	if want := []string{"a", "b", "b", "c"}; !slices.Equal(paid, want) {
		t.Fatalf("paid %v, want %v", paid, want)
	}
	if err := d.Pay(ctx, store.Session{ID: 1, State: store.StateConnected}); err != nil || len(paid) != 4 {
		t.Fatalf("a Pay with nothing owed: %v, paid %v", err, paid)
	}
	if want := []string{"a", "x", "c"}; !slices.Equal(released, want) {
		t.Fatalf("released %v, want %v", released, want)
	}
}
