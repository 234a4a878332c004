package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/go-zookeeper/zk"

	"github.com/shardflow/shardflow/cmd/shardflow/internal/cli"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/zkstore"
)

// aclStore is what `shardflow acl` needs of the store: zkstore's ACLs.
type aclStore interface {
	store.Store
	ACLFor(path string) []zk.ACL
	GetACL(ctx context.Context, path string) ([]zk.ACL, error)
	SetACL(ctx context.Context, path string, acl []zk.ACL) error
}

// runACL is `shardflow acl digest|check|fix`: the digest id of
// credentials, and a check (or repair) of every node of the namespace
// against the ACLs this session's flags define (zkstore.ACLFor).
func runACL(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || cli.HelpArg(args[0]) {
		return cli.GroupUsage(args, stdout, "acl")
	}
	switch args[0] {
	case "digest":
		return runACLDigest(args[1:], stdout)
	case "check", "fix":
	default:
		return cli.Usagef("unknown acl subcommand %q: use acl digest | acl check | acl fix", args[0])
	}
	fix := args[0] == "fix"
	fs, cf := cli.ZKFlagSet("acl "+args[0], stderr)
	if err := cli.ParseFlags(fs, args[1:]); err != nil {
		return err
	}
	if err := cf.LoadAuthFile(); err != nil {
		return err
	}
	if cf.Auth == "" {
		return cli.Usagef("acl %s needs the operator's credentials: --auth-file FILE or $%s (user:password)", args[0], cli.EnvAuth)
	}
	cf.AllowOpenNamespace = true // this command is the fix
	st, _, err := cf.Open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	as, ok := st.(aclStore)
	if !ok {
		return fmt.Errorf("acl: this store has no ACLs (only ZooKeeper has)")
	}
	var wrong, fixed int
	err = walk(ctx, as, store.Join(cf.Namespace), func(path string) error {
		have, err := as.GetACL(ctx, path)
		if err != nil {
			return err
		}
		want := as.ACLFor(path)
		if zkstore.SameACL(have, want) {
			return nil
		}
		wrong++
		fmt.Fprintf(stdout, "%s: %s, want %s\n", printable(path), describeACL(have), describeACL(want))
		if fix {
			if err := as.SetACL(ctx, path, want); err != nil {
				return fmt.Errorf("acl fix %s: %w (the operator's credentials need the admin permission on it)", path, err)
			}
			fixed++
		}
		return nil
	})
	if err != nil {
		return err
	}
	switch {
	case wrong == 0:
		fmt.Fprintf(stdout, "acl %s: every node of namespace %s carries the expected ACL\n", args[0], cf.Namespace)
		return nil
	case fix:
		fmt.Fprintf(stdout, "acl fix: %d nodes of namespace %s re-applied\n", fixed, cf.Namespace)
		return nil
	}
	return fmt.Errorf("acl check: %d nodes of namespace %s carry another ACL; run `shardflow acl fix` with the same flags", wrong, cf.Namespace)
}

func runACLDigest(args []string, stdout io.Writer) error {
	auth := os.Getenv(cli.EnvAuth)
	if len(args) == 1 {
		auth = args[0]
	}
	if len(args) > 1 || !strings.Contains(auth, ":") {
		return cli.Usagef("acl digest USER:PASSWORD (or $%s): prints the digest id for --operator-digest / --worker-digest", cli.EnvAuth)
	}
	fmt.Fprintln(stdout, zkstore.Digest(auth))
	return nil
}

// walk calls fn for path and every node below it, parents first.
func walk(ctx context.Context, st store.Store, path string, fn func(string) error) error {
	if err := fn(path); err != nil {
		if errors.Is(err, store.ErrNoNode) {
			return nil // deleted meanwhile
		}
		return err
	}
	kids, _, err := st.Children(ctx, path)
	if errors.Is(err, store.ErrNoNode) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, k := range kids {
		if err := walk(ctx, st, store.Join(path, k), fn); err != nil {
			return err
		}
	}
	return nil
}

// describeACL is an ACL as ZooKeeper's CLI shows it, compactly.
func describeACL(acl []zk.ACL) string {
	var parts []string
	for _, e := range acl {
		parts = append(parts, fmt.Sprintf("%s:%s:%s", e.Scheme, e.ID, perms(e.Perms)))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func perms(p int32) string {
	var b strings.Builder
	for _, f := range []struct {
		bit  int32
		name byte
	}{{zk.PermCreate, 'c'}, {zk.PermDelete, 'd'}, {zk.PermRead, 'r'}, {zk.PermWrite, 'w'}, {zk.PermAdmin, 'a'}} {
		if p&f.bit != 0 {
			b.WriteByte(f.name)
		}
	}
	return b.String()
}
