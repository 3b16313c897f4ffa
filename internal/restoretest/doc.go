// Package restoretest starts etcd members on data directories restored from
// a snapshot, on the exact peer URLs they were restored with.
//
// internal/etcdtest starts members on ports it picks at start, which suits
// a single restored member (a member with a data directory reads its
// cluster from there and does not check its peer URL) but not a
// multi-member cluster, whose members find each other through the peer
// URLs recorded at restore time. Here the URLs are picked first (FreeURLs),
// used for the restore, then for the start.
package restoretest
