// Package keypage sizes the pages of a read of etcd's keys by their bytes,
// not their count alone: a page of a thousand Helm release secrets of
// 100 KiB each is 100 MiB, which a reader holds at once.
package keypage

import clientv3 "go.etcd.io/etcd/client/v3"

// FirstKeys is the limit of a read's first request, before the size of
// the keys is known.
const FirstKeys = 64

// Pager sizes the limit of each request from the keys read so far: about
// Target bytes of keys and values at their mean size so far, at most
// MaxKeys keys. etcd cannot bound a range by bytes, so a page overshoots
// when the keys grow larger than those read before them (small keys
// sorted before large ones): it bounds pages of keys of one size, not
// every page.
type Pager struct {
	MaxKeys, Target int64
	keys, bytes     int64
}

// Saw counts the keys of resp.
func (p *Pager) Saw(resp *clientv3.GetResponse) {
	for _, kv := range resp.Kvs {
		p.keys++
		p.bytes += int64(len(kv.Key) + len(kv.Value))
	}
}

// Sized reports whether a key was counted: before, Limit is MaxKeys, and
// a reader should ask for FirstKeys.
func (p *Pager) Sized() bool { return p.bytes > 0 }

// Limit is the number of keys of about Target bytes, at the mean size of
// the keys read so far, between 1 and MaxKeys; MaxKeys before any key was
// read.
func (p *Pager) Limit() int64 {
	if p.bytes == 0 {
		return p.MaxKeys
	}
	return max(1, min(p.MaxKeys, p.Target*p.keys/p.bytes))
}
