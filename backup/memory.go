package backup

import "google.golang.org/grpc"

// ExportWindow is the gRPC flow-control window of ExportDialOptions.
const ExportWindow = 1 << 20

// ExportDialOptions returns the dial options (clientv3.Config.DialOptions)
// of an etcd client whose exports should hold little memory: flow-control
// windows fixed at ExportWindow. gRPC otherwise grows a connection's
// windows, up to 16 MiB, on a link that delivers fast, and holds what etcd
// streams ahead of the reader in them: about 10 MiB more at the peak of an
// export on loopback. A fixed window bounds a stream to a window per round
// trip (1 MiB: 100 MiB/s at 10 ms), so a snapshot's client, whose stream
// is the backup, keeps gRPC's estimate.
func ExportDialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithInitialWindowSize(ExportWindow), grpc.WithInitialConnWindowSize(ExportWindow)}
}

// MemoryLimit returns a soft memory limit for the Go runtime
// (debug.SetMemoryLimit, GOMEMLIMIT) of a process that backs up within
// budget bytes, half for the store's part buffers (s3.PartsWithin) and
// half for the compressor (Pipeline.MemoryBudget), as the CLI's --memory
// splits it: the compressor's half, plus 16 MiB for the etcd client's
// buffers (a snapshot's messages, or an export's chunk of at most 3 MiB
// and its gRPC window), the keys being encoded and the runtime. The part
// buffers of storage/s3 are mapped outside the Go heap and are not
// counted.
//
// Without a limit the collector lets the heap grow to twice what is live
// between collections, which a snapshot, whose etcd client allocates about
// its size again in messages, reaches at every cycle. With one it collects
// more often as the heap nears the limit, which costs CPU, and more than
// half of it only when what is live exceeds the limit: at 32 MiB of budget
// (a 32 MiB limit) a backup of a 1 GiB etcd runs about 100 collections, an
// export about 7 (BENCHMARKS.md). The limit is process-wide: a host that
// runs other work beside its backups sets its own.
func MemoryLimit(budget int64) int64 {
	return max(budget, 0)/2 + 16<<20
}
