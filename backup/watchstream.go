package backup

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// watchStream is a watch of every key of the cluster on a gRPC stream of
// its own, over the client's connection. One goroutine reads the stream
// and hands each response to the follower on C: a revision crosses one
// goroutine between gRPC's transport and the follower, where clientv3's
// watcher has three (its stream's reader, its dispatcher and the
// watcher's own), which a process of a thousand followers pays on every
// revision of every cluster. The watch does not resume by itself: when
// the stream breaks, or etcd cancels the watch, C is closed and Err says
// why; the follower checks etcd's history (checkHistory) and watches
// again from where it is.
type watchStream struct {
	// C delivers the responses in order, each with its events as
	// clientv3.WatchResponse has them, and the created response when
	// asked for; it is closed when the watch ends.
	C      <-chan clientv3.WatchResponse
	stream etcdserverpb.Watch_WatchClient
	sendMu sync.Mutex // gRPC allows one Send at a time
	err    error      // why C closed; written before the close
}

// watchAll opens a watch of every key from rev (0: from the revision after
// etcd's current one), with progress notifications, and returns once its
// create request is sent; created asks for the created response on C. ctx
// ends the watch. The stream waits for a connection to be ready, as
// clientv3's watches do.
func watchAll(ctx context.Context, cli *clientv3.Client, rev int64, created bool) (*watchStream, error) {
	conn := cli.ActiveConnection()
	if conn == nil {
		return nil, errors.New("watch: the etcd client has no connection")
	}
	stream, err := etcdserverpb.NewWatchClient(conn).Watch(ctx, grpc.WaitForReady(true), grpc.MaxCallRecvMsgSize(math.MaxInt32))
	if err != nil {
		return nil, fmt.Errorf("watch: %w", watchError(ctx, err))
	}
	req := &etcdserverpb.WatchCreateRequest{
		// Every key: etcd's range from "\x00" to the end of the key space.
		Key: []byte{0}, RangeEnd: []byte{0}, StartRevision: rev, ProgressNotify: true,
	}
	if err := stream.Send(&etcdserverpb.WatchRequest{RequestUnion: &etcdserverpb.WatchRequest_CreateRequest{CreateRequest: req}}); err != nil {
		return nil, fmt.Errorf("watch: %w", watchError(ctx, err))
	}
	c := make(chan clientv3.WatchResponse)
	ws := &watchStream{C: c, stream: stream}
	go ws.read(ctx, c, created)
	return ws, nil
}

// read hands the stream's responses to c until the watch ends.
func (ws *watchStream) read(ctx context.Context, c chan<- clientv3.WatchResponse, created bool) {
	defer close(c)
	for {
		resp, err := ws.stream.Recv()
		if err != nil {
			ws.err = fmt.Errorf("watch: %w", watchError(ctx, err))
			return
		}
		wr := clientv3.WatchResponse{Header: resp.Header, CompactRevision: resp.CompactRevision, Created: resp.Created, Canceled: resp.Canceled}
		switch {
		case resp.Canceled && resp.CompactRevision == 0:
			ws.err = cancelled(resp.CancelReason)
			return
		case resp.Canceled:
			ws.err = fmt.Errorf("watch: %w", rpctypes.ErrCompacted)
		case resp.Created && !created:
			continue
		}
		created = false
		if len(resp.Events) > 0 {
			wr.Events = make([]*clientv3.Event, len(resp.Events))
			for i, ev := range resp.Events {
				wr.Events[i] = (*clientv3.Event)(ev)
			}
		}
		select {
		case c <- wr:
		case <-ctx.Done():
			ws.err = ctx.Err()
			return
		}
		if ws.err != nil {
			return // the compacted response delivered: the watch is over
		}
	}
}

// Err returns why C was closed; it is read once C is closed.
func (ws *watchStream) Err() error { return ws.err }

// requestProgress asks etcd for a progress notification, which shows its
// current revision once the watch has caught up.
func (ws *watchStream) requestProgress() error {
	ws.sendMu.Lock()
	defer ws.sendMu.Unlock()
	return ws.stream.Send(&etcdserverpb.WatchRequest{RequestUnion: &etcdserverpb.WatchRequest_ProgressRequest{ProgressRequest: &etcdserverpb.WatchProgressRequest{}}})
}

// watchError is err of the watch's stream as etcd's client reports it
// (rpctypes' errors, such as ErrNoLeader), or ctx's error once it ended.
func watchError(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	return rpctypes.Error(err)
}

// cancelled is the error of a watch etcd cancelled for reason.
func cancelled(reason string) error {
	if reason == "" {
		return errors.New("watch: cancelled by etcd")
	}
	return fmt.Errorf("watch: cancelled by etcd: %w", rpctypes.Error(status.Error(codes.FailedPrecondition, reason)))
}
