package quartz

import "slices"

// intSet is a sorted set of ints, as Quartz keeps each field in a TreeSet.
// The markers allSpec ("*") and noSpec ("?") are members too, as in Quartz,
// since its searches see them.
type intSet []int

func (s *intSet) add(v int) {
	i, found := slices.BinarySearch(*s, v)
	if !found {
		*s = slices.Insert(*s, i, v)
	}
}

func (s intSet) has(v int) bool {
	_, found := slices.BinarySearch(s, v)
	return found
}

// ceil returns the least member >= v (TreeSet.tailSet(v).first()).
func (s intSet) ceil(v int) (int, bool) {
	i, _ := slices.BinarySearch(s, v)
	if i == len(s) {
		return 0, false
	}
	return s[i], true
}

func (s intSet) first() int { return s[0] }
