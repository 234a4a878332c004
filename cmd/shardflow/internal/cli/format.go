package cli

import (
	"fmt"
	"strings"
)

// JoinInts formats shard items for a table cell: "0,1,5", or "-" for none.
func JoinInts(items []int) string {
	if len(items) == 0 {
		return "-"
	}
	parts := make([]string, len(items))
	for i, v := range items {
		parts[i] = fmt.Sprint(v)
	}
	return strings.Join(parts, ",")
}

// OrDash is s, or "-" for an empty table cell.
func OrDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
