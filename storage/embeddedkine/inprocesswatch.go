package embeddedkine

import (
	"context"
	"errors"
	"io"
	"sync"

	kineserver "github.com/k3s-io/kine/pkg/server"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
)

// watchClient is the etcd Watch API of the bridge as a client. etcd's own
// adapter hands each message over an unbuffered channel, and that
// deadlocks with kine: kine's watch server sends the answer to one watch
// request (holding its send lock) before it reads the next request, while
// etcd's client waits to hand over that next request before it reads
// answers. Through gRPC the transport's buffers kept the two apart. Here
// requests are queued, so a client's send never waits for the server, and
// answers are handed over one at a time as the client reads them (the
// server waits for a slow reader, as gRPC's flow control made it wait).
type watchClient struct{ b *kineserver.KVServerBridge }

func (c watchClient) Watch(ctx context.Context, _ ...grpc.CallOption) (pb.Watch_WatchClient, error) {
	s := &watchStream{handover: newHandover[pb.WatchResponse](ctx), queued: make(chan struct{}, 1)}
	s.run(func() error { return c.b.Watch(watchServer{s: s}) })
	return s, nil
}

type watchStream struct {
	noMetadata
	*handover[pb.WatchResponse] // the server's answers

	mu       sync.Mutex
	requests []*pb.WatchRequest
	sendDone bool
	queued   chan struct{} // a request or CloseSend is waiting
}

// Send queues a request for the server; it does not wait for it.
func (s *watchStream) Send(r *pb.WatchRequest) error {
	s.mu.Lock()
	if s.sendDone {
		s.mu.Unlock()
		return errors.New("send on a watch stream after CloseSend")
	}
	s.requests = append(s.requests, r)
	s.mu.Unlock()
	select {
	case s.queued <- struct{}{}:
	default:
	}
	select {
	case <-s.done:
		return io.EOF // as gRPC: the stream's error comes from Recv
	case <-s.ctx.Done():
		return asStatus(s.ctx.Err())
	default:
		return nil
	}
}

func (s *watchStream) CloseSend() error {
	s.mu.Lock()
	s.sendDone = true
	s.mu.Unlock()
	select {
	case s.queued <- struct{}{}:
	default:
	}
	return nil
}

func (s *watchStream) SendMsg(m any) error {
	r, ok := m.(*pb.WatchRequest)
	if !ok {
		return errors.New("a watch stream takes *WatchRequest")
	}
	return s.Send(r)
}

func (s *watchStream) RecvMsg(m any) error {
	r, err := s.Recv()
	if err != nil {
		return err
	}
	out, ok := m.(*pb.WatchResponse)
	if !ok {
		return errors.New("a watch stream answers *WatchResponse")
	}
	out.Header, out.WatchId, out.Created, out.Canceled = r.Header, r.WatchId, r.Created, r.Canceled
	out.CompactRevision, out.CancelReason, out.Fragment, out.Events = r.CompactRevision, r.CancelReason, r.Fragment, r.Events
	return nil
}

// watchServer is the bridge's side of a watchStream.
type watchServer struct {
	noMetadata
	s *watchStream
}

// Recv returns the next queued request; io.EOF after CloseSend.
func (w watchServer) Recv() (*pb.WatchRequest, error) {
	s := w.s
	for {
		s.mu.Lock()
		if len(s.requests) > 0 {
			r := s.requests[0]
			s.requests[0] = nil
			s.requests = s.requests[1:]
			s.mu.Unlock()
			return r, nil
		}
		closed := s.sendDone
		s.mu.Unlock()
		if closed {
			return nil, io.EOF
		}
		select {
		case <-s.queued:
		case <-s.ctx.Done():
			return nil, s.ctx.Err()
		}
	}
}

// Send hands an answer to the client, waiting until it reads it.
func (w watchServer) Send(r *pb.WatchResponse) error { return w.s.send(r) }
func (w watchServer) Context() context.Context       { return w.s.ctx }

func (w watchServer) SendMsg(m any) error {
	r, ok := m.(*pb.WatchResponse)
	if !ok {
		return errors.New("a watch stream sends *WatchResponse")
	}
	return w.Send(r)
}

func (w watchServer) RecvMsg(m any) error {
	r, err := w.Recv()
	if err != nil {
		return err
	}
	out, ok := m.(*pb.WatchRequest)
	if !ok {
		return errors.New("a watch stream takes *WatchRequest")
	}
	out.RequestUnion = r.RequestUnion
	return nil
}
