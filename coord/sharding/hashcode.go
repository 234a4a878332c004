package sharding

import "unicode/utf16"

// JavaStringHashCode returns what java.lang.String.hashCode returns for s:
// s[0]*31^(n-1) + s[1]*31^(n-2) + ... + s[n-1] over the UTF-16 code units
// of s, in int32 arithmetic that wraps on overflow. "" gives 0.
//
// s is decoded as UTF-8; an invalid byte becomes U+FFFD, as Java's UTF-8
// decoder would make it. Characters outside the Basic Multilingual Plane
// count as their two surrogate code units, as in Java.
func JavaStringHashCode(s string) int32 {
	var h int32
	for _, r := range s {
		if r >= 0x10000 {
			hi, lo := utf16.EncodeRune(r)
			h = 31*h + hi
			h = 31*h + lo
			continue
		}
		h = 31*h + r
	}
	return h
}
