// Package recipe holds coord's coordination recipes over coord/store alone,
// after etcd's client/v3/concurrency: leader election (Election), mutual
// exclusion without waiting (TryLatch), the distribute-once barrier
// (Barrier) and the writes a cut connection leaves owed to its session
// (Debts). Each states what it guarantees under which session states:
// connected, suspended (a cut connection that may resume with its
// ephemeral nodes) and ended. They know nothing of jobs; coord's protocol
// is built on them.
package recipe
