package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Join joins path elements with "/" and returns an absolute path.
func Join(elem ...string) string {
	// The length first, so that the path is one allocation, not one per
	// growth of the builder: the protocol builds paths on every run.
	n := 0
	for _, e := range elem {
		if e = strings.Trim(e, "/"); e != "" {
			n += 1 + len(e)
		}
	}
	if n == 0 {
		return "/"
	}
	var b strings.Builder
	b.Grow(n)
	for _, e := range elem {
		e = strings.Trim(e, "/")
		if e == "" {
			continue
		}
		b.WriteByte('/')
		b.WriteString(e)
	}
	if b.Len() == 0 {
		return "/"
	}
	return b.String()
}

// Parent returns the parent of an absolute path ("/" for top-level nodes).
func Parent(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i <= 0 {
		return "/"
	}
	return p[:i]
}

// Base returns the last element of a path.
func Base(p string) string {
	return p[strings.LastIndexByte(p, '/')+1:]
}

// ValidatePath checks that p is absolute, has no empty element and no
// trailing slash. The error wraps ErrBadPath and names the path.
func ValidatePath(p string) error {
	if p == "/" {
		return nil
	}
	if !strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/") || strings.Contains(p, "//") {
		return fmt.Errorf("%w: %q", ErrBadPath, p)
	}
	// Element by element, in place: every request's paths are checked.
	for rest, more := p[1:], true; more; {
		var e string
		e, rest, more = strings.Cut(rest, "/")
		if e == "." || e == ".." {
			return fmt.Errorf("%w: %q has a relative element", ErrBadPath, p)
		}
	}
	return nil
}

// CreateAll creates p and any missing ancestors as empty persistent nodes,
// like mkdir -p. An existing node is not an error; its data is left as is.
func CreateAll(ctx context.Context, s Store, p string) error {
	if p == "/" {
		return nil
	}
	ok, _, err := s.Exists(ctx, p)
	if err != nil {
		return err
	}
	if ok {
		return nil
	}
	if err := CreateAll(ctx, s, Parent(p)); err != nil {
		return err
	}
	if _, err := s.Create(ctx, p, nil, Persistent); err != nil && !errors.Is(err, ErrNodeExists) {
		return err
	}
	return nil
}

// DeleteAll deletes p and everything under it. A missing node is not an
// error. Not atomic: concurrent creations under p can make it fail with
// ErrNotEmpty.
func DeleteAll(ctx context.Context, s Store, p string) error {
	children, _, err := s.Children(ctx, p)
	if errors.Is(err, ErrNoNode) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, c := range children {
		if err := DeleteAll(ctx, s, Join(p, c)); err != nil {
			return err
		}
	}
	if err := s.Delete(ctx, p, AnyVersion); err != nil && !errors.Is(err, ErrNoNode) {
		return err
	}
	return nil
}
