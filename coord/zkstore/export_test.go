package zkstore

import "github.com/go-zookeeper/zk"

// Conn returns the store's current go-zookeeper client, for the tests of
// package zkstore_test (which server the session is on).
func (s *Store) Conn() *zk.Conn { return s.conn() }

// DropConnections cuts the store's current connections, as a network blip
// would, for the tests of package zkstore_test.
func (s *Store) DropConnections() int { return s.dropConnections() }
