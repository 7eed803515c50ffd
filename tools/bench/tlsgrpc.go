package main

// The gRPC streaming test of the HTTPS section: grpc-go clients, each with one
// bidirectional stream through an intercepted tunnel (HTTP/2, the injected header on the
// stream), sending a message and waiting for its echo, one after another. The TLS upstream
// serves the echo with grpc-go (grpc.Server as an http.Handler on its HTTP/2 server) after
// the same injected-header check as every other request, and counts each echoed message as
// served. Squid 5.7 has no HTTP/2: the test is airlock against direct.

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	grpccreds "google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// grpcPayload is the size of each streamed message.
const grpcPayload = 256

// benchEcho is the upstream's gRPC service bench.Echo with one method, the bidirectional
// Stream, declared by hand (no generated code) on wrapperspb.BytesValue.
type benchEcho struct{ served *atomic.Int64 }

var benchEchoDesc = grpc.ServiceDesc{
	ServiceName: "bench.Echo",
	HandlerType: (*any)(nil),
	Streams: []grpc.StreamDesc{{StreamName: "Stream", ServerStreams: true, ClientStreams: true,
		Handler: func(srv any, ss grpc.ServerStream) error { return srv.(benchEcho).stream(ss) }}},
}

// stream echoes every message until the client ends its side.
func (e benchEcho) stream(ss grpc.ServerStream) error {
	for {
		in := new(wrapperspb.BytesValue)
		if err := ss.RecvMsg(in); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		e.served.Add(1)
		if err := ss.SendMsg(in); err != nil {
			return err
		}
	}
}

// newBenchGRPC is the upstream's gRPC server.
func newBenchGRPC(served *atomic.Int64) *grpc.Server {
	s := grpc.NewServer()
	s.RegisterService(&benchEchoDesc, benchEcho{served: served})
	return s
}

// isGRPC reports whether an upstream request is a gRPC call (HTTP/2, application/grpc).
func isGRPC(protoMajor int, contentType string) bool {
	return protoMajor == 2 && strings.HasPrefix(contentType, "application/grpc")
}

// runGRPCStream runs conns clients for d, each echoing messages on one stream; an
// operation is one message there and back.
func runGRPCStream(ctx context.Context, c tlsClient, conns int, d time.Duration) (tlsResult, error) {
	return parallel(ctx, conns, d, func(ctx context.Context, more func() bool, ops *atomic.Int64) error {
		_, port, _ := strings.Cut(c.upstream, ":")
		cc, err := grpc.NewClient("passthrough:///"+net.JoinHostPort(tlsInjectHost, port),
			grpc.WithTransportCredentials(grpccreds.NewTLS(&tls.Config{RootCAs: c.roots, ServerName: tlsInjectHost})),
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
				return c.dialTunnel(ctx, tlsInjectHost)
			}))
		if err != nil {
			return err
		}
		defer cc.Close()
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		if c.inject {
			sctx = metadata.AppendToOutgoingContext(sctx, "authorization", "Bearer "+tlsToken)
		}
		st, err := cc.NewStream(sctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, "/bench.Echo/Stream")
		if err != nil {
			return fmt.Errorf("gRPC stream: %w", err)
		}
		out := wrapperspb.Bytes(bytes.Repeat([]byte("m"), grpcPayload))
		for more() {
			if err := st.SendMsg(out); err != nil {
				return fmt.Errorf("gRPC send: %w", err)
			}
			in := new(wrapperspb.BytesValue)
			if err := st.RecvMsg(in); err != nil {
				return fmt.Errorf("gRPC receive: %w", err)
			}
			if !bytes.Equal(in.GetValue(), out.GetValue()) {
				return errors.New("gRPC echo differs from the message sent")
			}
			ops.Add(1)
		}
		if err := st.CloseSend(); err != nil {
			return fmt.Errorf("gRPC close: %w", err)
		}
		if err := st.RecvMsg(new(wrapperspb.BytesValue)); !errors.Is(err, io.EOF) {
			return fmt.Errorf("gRPC stream end: %v, want the OK status", err)
		}
		return nil
	})
}
