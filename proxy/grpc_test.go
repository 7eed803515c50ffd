package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpccreds "google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The test gRPC service, declared by hand (no generated code): test.Echo/Unary and the
// server-streaming test.Echo/Stream, both on wrapperspb.StringValue (real protobuf).
type echoService struct {
	seen    *seen
	gotMsg1 chan struct{} // closed by the client when it holds the stream's first message
}

var echoServiceDesc = grpc.ServiceDesc{
	ServiceName: "test.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Unary", Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		return srv.(*echoService).unary(ctx, in)
	}}},
	Streams: []grpc.StreamDesc{{StreamName: "Stream", ServerStreams: true, Handler: func(srv any, ss grpc.ServerStream) error {
		return srv.(*echoService).stream(ss)
	}}},
}

func authOf(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	return strings.Join(md.Get("authorization"), ",")
}

// unary answers "fail" with PermissionDenied, "echo" with the credential it got (which the
// proxy must mask), anything else with a greeting; it sets a trailer.
func (e *echoService) unary(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	auth := authOf(ctx)
	e.seen.add(auth, "grpc", in.GetValue())
	_ = grpc.SetTrailer(ctx, metadata.Pairs("x-unary-trailer", "t1"))
	switch in.GetValue() {
	case "fail":
		return nil, status.Error(codes.PermissionDenied, "denied by the test server")
	case "echo":
		return wrapperspb.String("token:" + strings.TrimPrefix(auth, "Bearer ")), nil
	}
	return wrapperspb.String("hello " + in.GetValue()), nil
}

// stream sends two messages, the second only after the client holds the first (so a proxy
// that buffers the response deadlocks the test), then ends with ResourceExhausted and a
// trailer.
func (e *echoService) stream(ss grpc.ServerStream) error {
	in := new(wrapperspb.StringValue)
	if err := ss.RecvMsg(in); err != nil {
		return err
	}
	e.seen.add(authOf(ss.Context()), "grpc", in.GetValue())
	if err := ss.SendMsg(wrapperspb.String("first " + in.GetValue())); err != nil {
		return err
	}
	select {
	case <-e.gotMsg1:
	case <-time.After(waitTimeout):
		return status.Error(codes.DeadlineExceeded, "the first message did not reach the client before the second was sent")
	}
	if err := ss.SendMsg(wrapperspb.String("second")); err != nil {
		return err
	}
	ss.SetTrailer(metadata.Pairs("x-stream-trailer", "t2"))
	return status.Error(codes.ResourceExhausted, "enough for now")
}

// grpcUpstream serves the echo service over TLS for api.test and routes api.test:443 to it.
func (h *streamHarness) grpcUpstream(t *testing.T, svc *echoService) {
	t.Helper()
	cert := h.upstream.leaf(t, "api.test")
	srv := grpc.NewServer(grpc.Creds(grpccreds.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}})))
	srv.RegisterService(&echoServiceDesc, svc)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	h.mu.Lock()
	h.routes[netip.AddrPortFrom(addrAPI, 443)] = l.Addr().String()
	h.mu.Unlock()
}

// dialConnect opens a CONNECT tunnel to addr through the explicit proxy, as grpc-go's own
// proxy support does (it reads HTTPS_PROXY, which a test must not set process-wide).
func (h *streamHarness) dialConnect(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", h.addr)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", addr, addr)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != 200 {
		c.Close()
		return nil, fmt.Errorf("CONNECT %s: %v %v", addr, resp, err)
	}
	return &prefixConn{Conn: c, r: br}, nil
}

func (h *streamHarness) grpcClient(t *testing.T) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///api.test:443",
		grpc.WithTransportCredentials(grpccreds.NewTLS(&tls.Config{RootCAs: h.airlockRoots(), ServerName: "api.test"})),
		grpc.WithContextDialer(h.dialConnect))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// TestGRPCThroughInterception calls a grpc-go server with a grpc-go client through an
// intercepted tunnel with an injected credential: unary and server streaming, status codes
// and trailers intact, an L7 path denial as PermissionDenied, an echoed secret masked inside
// a still-valid protobuf message, and a placeholder in a message refused.
func TestGRPCThroughInterception(t *testing.T) {
	h := newStreamHarness(t)
	s := &seen{}
	svc := &echoService{seen: s, gotMsg1: make(chan struct{})}
	h.grpcUpstream(t, svc)
	cc := h.grpcClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	unary := func(v string) (string, metadata.MD, error) {
		out, tr := new(wrapperspb.StringValue), metadata.MD{}
		err := cc.Invoke(ctx, "/test.Echo/Unary", wrapperspb.String(v), out, grpc.Trailer(&tr))
		return out.GetValue(), tr, err
	}
	t.Run("unary", func(t *testing.T) {
		got, tr, err := unary("world")
		if err != nil || got != "hello world" || strings.Join(tr.Get("x-unary-trailer"), "") != "t1" {
			t.Fatalf("got %q, trailer %v, %v; want hello world with x-unary-trailer", got, tr, err)
		}
		_, _, err = unary("fail")
		if st := status.Convert(err); st.Code() != codes.PermissionDenied || st.Message() != "denied by the test server" {
			t.Fatalf("got %v, want the server's PermissionDenied", err)
		}
	})
	t.Run("server streaming", func(t *testing.T) { grpcStream(ctx, t, cc, svc) })
	t.Run("echoed secret is masked", func(t *testing.T) {
		got, _, err := unary("echo")
		if want := "token:" + strings.Repeat("*", len(streamSecret)); err != nil || got != want {
			t.Fatalf("got %q, %v; want %q (masked, the message still decodes)", got, err, want)
		}
	})
	t.Run("placeholder in a message is refused", func(t *testing.T) {
		_, _, msgs := s.snapshot()
		before := len(msgs)
		_, _, err := unary("use " + h.ph.For("tok"))
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "credential_misuse") {
			t.Fatalf("got %v, want PermissionDenied from the proxy's credential_misuse denial", err)
		}
		if _, _, msgs := s.snapshot(); len(msgs) != before {
			t.Fatalf("the upstream got %q", msgs[before:])
		}
	})
	t.Run("L7 path denial", func(t *testing.T) {
		err := cc.Invoke(ctx, "/test.Other/Unary", wrapperspb.String("x"), new(wrapperspb.StringValue))
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "403") {
			t.Fatalf("got %v, want PermissionDenied from the proxy's 403", err)
		}
	})
	s.checkInjected(t, 4)
}

func grpcStream(ctx context.Context, t *testing.T, cc *grpc.ClientConn, svc *echoService) {
	cs, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/test.Echo/Stream")
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.SendMsg(wrapperspb.String("go")); err != nil {
		t.Fatal(err)
	}
	_ = cs.CloseSend()
	var got []string
	for {
		m := new(wrapperspb.StringValue)
		err := cs.RecvMsg(m)
		if errors.Is(err, io.EOF) {
			t.Fatal("the stream ended without the server's status")
		}
		if err != nil {
			if st := status.Convert(err); st.Code() != codes.ResourceExhausted || st.Message() != "enough for now" {
				t.Fatalf("stream ended with %v, want ResourceExhausted", err)
			}
			break
		}
		got = append(got, m.GetValue())
		if len(got) == 1 {
			close(svc.gotMsg1)
		}
	}
	if strings.Join(got, ",") != "first go,second" {
		t.Fatalf("got messages %q", got)
	}
	if tr := cs.Trailer(); strings.Join(tr.Get("x-stream-trailer"), "") != "t2" {
		t.Fatalf("trailer %v, want x-stream-trailer", tr)
	}
}
