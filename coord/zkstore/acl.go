package zkstore

import (
	"context"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-zookeeper/zk"

	"github.com/shardflow/shardflow/coord/store"
)

// Digest returns the ZooKeeper digest id of credentials "user:password":
// "user:" + base64(sha1("user:password")), the id of a digest ACL entry.
// Give it to processes that must grant that identity permissions without
// knowing its password (Config.OperatorDigest, Config.WorkerDigest;
// `shardflow acl digest` prints it).
func Digest(auth string) string {
	user, _, _ := strings.Cut(auth, ":")
	sum := sha1.Sum([]byte(auth))
	return user + ":" + base64.StdEncoding.EncodeToString(sum[:])
}

// workerPerms are a worker identity's permissions on a node at path in
// the shardflow layout: read only on the namespace node (no new jobs) and
// a job's config subtree (no edits); read, create and delete on a job's
// node (its runtime children: leader, sharding, refusals; deleting config
// would need it empty, which the worker cannot make it); all on the rest.
func workerPerms(path string) int32 {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) <= 1:
		return zk.PermRead
	case len(parts) == 2:
		return zk.PermRead | zk.PermCreate | zk.PermDelete
	case parts[2] == "config":
		return zk.PermRead
	}
	return zk.PermAll
}

// ACLFor returns the ACL this store gives a node it creates at path (and
// that `shardflow acl fix` re-applies):
//   - without Auth: world:anyone with all permissions;
//   - with Auth only: digest(Auth) all, plus world read with WorldReadable;
//   - with OperatorDigest and WorkerDigest: the operator all on every
//     node; the worker read only on the namespace node and a job's config
//     subtree, read, create and delete on a job's node, all on the rest
//     (registration, sharding, runs): a worker cannot add, change or
//     remove a job definition; plus world read with WorldReadable.
func (s *Store) ACLFor(path string) []zk.ACL { return s.cfg.aclFor(path) }

func (c Config) aclFor(path string) []zk.ACL {
	if c.Auth == "" {
		return zk.WorldACL(zk.PermAll)
	}
	var acl []zk.ACL
	if c.OperatorDigest != "" && c.WorkerDigest != "" {
		acl = []zk.ACL{{Perms: zk.PermAll, Scheme: "digest", ID: c.OperatorDigest}, {Perms: workerPerms(path), Scheme: "digest", ID: c.WorkerDigest}}
	} else {
		user, password, _ := strings.Cut(c.Auth, ":")
		acl = zk.DigestACL(zk.PermAll, user, password)
	}
	if c.WorldReadable {
		acl = append(acl, zk.WorldACL(zk.PermRead)...)
	}
	return acl
}

// worldWrite are the permissions that let anyone change a tree.
const worldWrite = zk.PermWrite | zk.PermCreate | zk.PermDelete | zk.PermAdmin

// GetACL returns a node's ACL.
func (s *Store) GetACL(ctx context.Context, path string) ([]zk.ACL, error) {
	if err := store.ValidatePath(path); err != nil {
		return nil, err
	}
	var acl []zk.ACL
	c, err := s.call(ctx, func(c *client) error {
		var err error
		acl, _, err = c.conn.GetACL(s.full(path))
		return err
	}, nil)
	if err != nil {
		return nil, s.mapErr(c, "get acl", path, err)
	}
	return acl, nil
}

// SetACL replaces a node's ACL (any version). It needs the admin
// permission on the node.
func (s *Store) SetACL(ctx context.Context, path string, acl []zk.ACL) error {
	if err := store.ValidatePath(path); err != nil {
		return err
	}
	c, err := s.call(ctx, func(c *client) error {
		_, err := c.conn.SetACL(s.full(path), acl, -1)
		return err
	}, nil)
	if err != nil {
		return s.mapErr(c, "set acl", path, err)
	}
	return nil
}

// WorldWritable reports whether anyone may change the node at path (its
// ACL grants world:anyone write, create, delete or admin); false for a
// node that does not exist.
func (s *Store) WorldWritable(ctx context.Context, path string) (bool, error) {
	acl, err := s.GetACL(ctx, path)
	if err != nil {
		if errors.Is(err, store.ErrNoNode) {
			return false, nil
		}
		return false, err
	}
	return worldWritable(acl), nil
}

func worldWritable(acl []zk.ACL) bool {
	for _, e := range acl {
		if e.Scheme == "world" && e.ID == "anyone" && e.Perms&worldWrite != 0 {
			return true
		}
	}
	return false
}

// SameACL reports whether two ACLs grant the same permissions, in any
// order.
func SameACL(a, b []zk.ACL) bool {
	key := func(acl []zk.ACL) []string {
		out := make([]string, len(acl))
		for i, e := range acl {
			out[i] = fmt.Sprintf("%s:%s:%d", e.Scheme, e.ID, e.Perms)
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(key(a), key(b))
}

// Authenticated reports whether the store's session carries credentials
// (Config.Auth): a namespace anyone may write is then a misconfiguration
// to refuse, not the intended open setup.
func (s *Store) Authenticated() bool { return s.cfg.Auth != "" }
