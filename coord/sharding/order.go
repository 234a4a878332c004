package sharding

import (
	"slices"
	"strings"
	"unicode/utf8"
)

// CompareServerIDs orders server ids as Java's String.compareTo does, by
// UTF-16 code units, which is the order ElasticJob hands servers to its
// strategies. It returns -1, 0 or +1.
//
// Go's string order is UTF-8 byte order, the order of code points. The two
// differ for characters above U+FFFF: in UTF-16 they are surrogate pairs
// starting with 0xD800-0xDBFF, so they sort before U+E000-U+FFFF, where by
// code point they sort after. Invalid UTF-8, which no id written by Java
// holds, is read one byte at a time as U+FFFD, and ids that compare equal
// that way are ordered by their bytes, so every server sees one order.
func CompareServerIDs(a, b string) int {
	if c := compareUTF16(a, b); c != 0 {
		return c
	}
	return strings.Compare(a, b)
}

// compareUTF16 compares the UTF-16 code unit sequences of a and b.
func compareUTF16(a, b string) int {
	for a != "" && b != "" {
		ra, na := utf8.DecodeRuneInString(a)
		rb, nb := utf8.DecodeRuneInString(b)
		a, b = a[na:], b[nb:]
		if ra == rb {
			continue
		}
		// Only the first code unit can differ first: equal leading units
		// with different runes means two supplementary characters whose
		// high surrogates match, decided by the low ones, which order as
		// the code points do.
		ua, ub := firstUnit(ra), firstUnit(rb)
		if ua == ub {
			ua, ub = int(ra), int(rb)
		}
		if ua < ub {
			return -1
		}
		return 1
	}
	switch {
	case a == "" && b == "":
		return 0
	case a == "":
		return -1
	}
	return 1
}

// firstUnit returns the first UTF-16 code unit of r: r itself in the Basic
// Multilingual Plane, else its high surrogate.
func firstUnit(r rune) int {
	if r < 0x10000 {
		return int(r)
	}
	return 0xD800 + int((r-0x10000)>>10)
}

// SortedServers returns a copy of servers with duplicates removed, in the
// order every built-in strategy works on: ascending by CompareServerIDs,
// as ElasticJob 1.x sorts server ids (Java's String.compareTo).
func SortedServers(servers []string) []string {
	s := slices.Clone(servers)
	slices.SortFunc(s, CompareServerIDs)
	return slices.Compact(s)
}
