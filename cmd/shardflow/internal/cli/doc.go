// Package cli is the plumbing every shardflow command shares: the
// connection flags and the store session they open, flag parsing with the
// commands' synopses, and usage errors (exit status 2).
package cli
