package embeddedkine

import (
	"context"
	"errors"
	"io"

	kineserver "github.com/k3s-io/kine/pkg/server"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	etcdkubernetes "go.etcd.io/etcd/client/v3/kubernetes"
	"go.etcd.io/etcd/server/v3/proxy/grpcproxy/adapter"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Client returns an etcd client whose calls go straight to this kine's etcd
// bridge in the same process: the same requests, answers and watch streams
// as through the unix socket, without gRPC's framing, protobuf encoding and
// socket copies on either side (about a tenth of the server's CPU while
// workspaces are created, docs/performance.md). The server's own stores use
// it (clusterstore.NewClient); the socket stays for health checks and
// tools. Errors reach the caller as they would through gRPC: as a gRPC
// status, a plain error as codes.Unknown. Answers are shared, not copied,
// so callers must not change them (upstream's storage does not).
func (k *Kine) Client() *etcdkubernetes.Client {
	c := clientv3.NewCtxClient(context.Background())
	c.KV = clientv3.NewKVFromKVClient(kvClient{k.bridge}, c)
	c.Watcher = clientv3.NewWatchFromWatchClient(watchClient{k.bridge}, c)
	c.Lease = clientv3.NewLeaseFromLeaseClient(adapter.LeaseServerToLeaseClient(k.bridge), c, 0)
	c.Maintenance = clientv3.NewMaintenanceFromMaintenanceClient(adapter.MaintenanceServerToMaintenanceClient(k.bridge), c)
	c.Cluster = clientv3.NewClusterFromClusterClient(adapter.ClusterServerToClusterClient(k.bridge), c)
	kc := &etcdkubernetes.Client{Client: c}
	kc.Kubernetes = kc
	return kc
}

// asStatus is the error a gRPC client would have seen: the status the
// server returned, a context's error as its code, anything else Unknown.
func asStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err).Err()
	}
	return status.Error(codes.Unknown, err.Error())
}

// kvClient is the etcd KV API of the bridge as a client. etcd's own adapter
// does not stream ranges, and upstream's storage would then mark streamed
// lists unsupported for every store.
type kvClient struct{ b *kineserver.KVServerBridge }

func (c kvClient) Range(ctx context.Context, in *pb.RangeRequest, _ ...grpc.CallOption) (*pb.RangeResponse, error) {
	r, err := c.b.Range(ctx, in)
	return r, asStatus(err)
}

// tooLarge is the error kine's gRPC server gives a request larger than it
// takes (MaxRequestBytes): the in-process client keeps the same limit, so
// an object too large for the datastore is refused, not stored.
func tooLarge(m proto.Message) error {
	if n := proto.Size(m); n > MaxRequestBytes {
		return status.Errorf(codes.ResourceExhausted, "grpc: received message larger than max (%d vs. %d)", n, MaxRequestBytes)
	}
	return nil
}

func (c kvClient) Put(ctx context.Context, in *pb.PutRequest, _ ...grpc.CallOption) (*pb.PutResponse, error) {
	if err := tooLarge(in); err != nil {
		return nil, err
	}
	r, err := c.b.Put(ctx, in)
	return r, asStatus(err)
}

func (c kvClient) DeleteRange(ctx context.Context, in *pb.DeleteRangeRequest, _ ...grpc.CallOption) (*pb.DeleteRangeResponse, error) {
	r, err := c.b.DeleteRange(ctx, in)
	return r, asStatus(err)
}

func (c kvClient) Txn(ctx context.Context, in *pb.TxnRequest, _ ...grpc.CallOption) (*pb.TxnResponse, error) {
	if err := tooLarge(in); err != nil {
		return nil, err
	}
	r, err := c.b.Txn(ctx, in)
	return r, asStatus(err)
}

func (c kvClient) Compact(ctx context.Context, in *pb.CompactionRequest, _ ...grpc.CallOption) (*pb.CompactionResponse, error) {
	r, err := c.b.Compact(ctx, in)
	return r, asStatus(err)
}

// RangeStream runs the bridge's stream in a goroutine that hands each
// chunk over as the client reads it; the caller's context ends it.
func (c kvClient) RangeStream(ctx context.Context, in *pb.RangeRequest, _ ...grpc.CallOption) (pb.KV_RangeStreamClient, error) {
	s := &rangeStream{handover: newHandover[pb.RangeStreamResponse](ctx)}
	s.run(func() error { return c.b.RangeStream(in, rangeStreamServer{s: s}) })
	return s, nil
}

// handover carries a server's messages to an in-process client one at a
// time: the server's send waits until the client reads (as gRPC's flow
// control made it wait), and the client reads how the server's side
// ended once it has taken every message.
type handover[T any] struct {
	ctx    context.Context
	cancel context.CancelFunc
	ch     chan *T
	done   chan struct{}
	err    error // the server's end; set before done closes
}

func newHandover[T any](ctx context.Context) *handover[T] {
	ctx, cancel := context.WithCancel(ctx)
	return &handover[T]{ctx: ctx, cancel: cancel, ch: make(chan *T), done: make(chan struct{})}
}

// run runs the server's side of the stream in a goroutine.
func (h *handover[T]) run(server func() error) {
	go func() {
		defer close(h.done)
		h.err = asStatus(server())
	}()
}

// Recv returns the server's next message, io.EOF after the last, or the
// stream's error.
func (h *handover[T]) Recv() (*T, error) {
	select {
	case m := <-h.ch:
		return m, nil
	case <-h.done: // ch is unbuffered: every message sent was taken
		h.cancel()
		if h.err != nil {
			return nil, h.err
		}
		return nil, io.EOF
	case <-h.ctx.Done():
		return nil, asStatus(h.ctx.Err())
	}
}

// send hands m to the client, waiting until it reads it.
func (h *handover[T]) send(m *T) error {
	select {
	case h.ch <- m:
		return nil
	case <-h.ctx.Done():
		return h.ctx.Err()
	}
}

func (h *handover[T]) Context() context.Context { return h.ctx }

type rangeStream struct {
	noMetadata
	*handover[pb.RangeStreamResponse]
}

func (s *rangeStream) CloseSend() error { return nil }
func (s *rangeStream) SendMsg(any) error {
	return errors.New("a range stream takes no messages from its client")
}
func (s *rangeStream) RecvMsg(m any) error {
	r, err := s.Recv()
	if err != nil {
		return err
	}
	out, ok := m.(*pb.RangeStreamResponse)
	if !ok {
		return errors.New("a range stream answers *RangeStreamResponse")
	}
	out.RangeResponse = r.RangeResponse
	return nil
}

// rangeStreamServer is the bridge's side of a rangeStream.
type rangeStreamServer struct {
	noMetadata
	s *rangeStream
}

func (r rangeStreamServer) Send(m *pb.RangeStreamResponse) error { return r.s.send(m) }
func (r rangeStreamServer) Context() context.Context             { return r.s.ctx }
func (r rangeStreamServer) SendMsg(m any) error {
	msg, ok := m.(*pb.RangeStreamResponse)
	if !ok {
		return errors.New("a range stream sends *RangeStreamResponse")
	}
	return r.Send(msg)
}
func (r rangeStreamServer) RecvMsg(any) error { return io.EOF }

// noMetadata is the gRPC metadata of an in-process stream: there is none.
type noMetadata struct{}

func (noMetadata) Header() (metadata.MD, error) { return metadata.MD{}, nil }
func (noMetadata) Trailer() metadata.MD         { return metadata.MD{} }
func (noMetadata) SetHeader(metadata.MD) error  { return nil }
func (noMetadata) SendHeader(metadata.MD) error { return nil }
func (noMetadata) SetTrailer(metadata.MD)       {}
