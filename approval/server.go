package approval

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// SocketFile is the operator socket's name in the state directory.
const SocketFile = "approvals.sock"

// Listen opens the operator socket in stateDir: a unix socket of mode 0600, replacing a
// stale one. Only the sidecar's user (and root) can connect, and Serve checks the peer by
// SO_PEERCRED as well.
func Listen(stateDir string) (net.Listener, error) {
	path := filepath.Join(stateDir, SocketFile)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	old := unix.Umask(0o177) // the socket is born 0600: no window in which others may connect
	l, err := net.Listen("unix", path)
	unix.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	return l, nil
}

type peerKey struct{}

// peer is the credentials of the operator socket's peer.
type peer struct {
	uid, pid int
	err      error
}

// peerOf reads SO_PEERCRED of a unix connection.
func peerOf(c net.Conn) peer {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return peer{err: errors.New("not a unix socket")}
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return peer{err: err}
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return peer{err: err}
	}
	if cerr != nil {
		return peer{err: cerr}
	}
	return peer{uid: int(cred.Uid), pid: int(cred.Pid)}
}

// Serve answers the operator API on l (from Listen) until ctx ends. Every request must come
// from root or the sidecar's own user (SO_PEERCRED); the approver is named "uid:N".
func (s *Stage) Serve(ctx context.Context, l net.Listener) error {
	srv := &http.Server{
		Handler:           s.handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, peerKey{}, peerOf(c))
		},
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve approvals: %w", err)
	}
	return nil
}

// listing is the body of GET /v1/approvals.
type listing struct {
	Asks   []Ask   `json:"asks"`
	Grants []Grant `json:"grants"`
}

// grantRequest is the body of POST /v1/approvals/{id}/grant.
type grantRequest struct {
	Scope Scope  `json:"scope,omitempty"`
	For   string `json:"for,omitempty"`
}

// apiError is the body of an error answer.
type apiError struct {
	Error string `json:"error"`
}

func (s *Stage) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/approvals", func(w http.ResponseWriter, r *http.Request) {
		asks, grants := s.List()
		writeJSON(w, http.StatusOK, listing{Asks: nonNil(asks), Grants: nonNil(grants)})
	})
	mux.HandleFunc("POST /v1/approvals/{id}/{verb}", s.answerHandler)
	return operatorOnly(mux)
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// operatorOnly refuses peers other than root and the sidecar's user.
func operatorOnly(next http.Handler) http.Handler {
	me := os.Geteuid()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, _ := r.Context().Value(peerKey{}).(peer)
		if p.err != nil || (p.uid != 0 && p.uid != me) {
			writeJSON(w, http.StatusForbidden, apiError{Error: ErrNotOperator.Error()})
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Stage) answerHandler(w http.ResponseWriter, r *http.Request) {
	p, _ := r.Context().Value(peerKey{}).(peer)
	approver := fmt.Sprintf("uid:%d", p.uid)
	id := r.PathValue("id")
	var err error
	var g Grant
	switch r.PathValue("verb") {
	case "grant":
		req, derr := readGrant(w, r)
		if derr != nil {
			writeJSON(w, http.StatusBadRequest, apiError{Error: "body: " + derr.Error()})
			return
		}
		ans := Answer{Grant: true, Scope: req.Scope, Approver: approver}
		if req.For != "" {
			if ans.For, err = time.ParseDuration(req.For); err != nil {
				writeJSON(w, http.StatusBadRequest, apiError{Error: fmt.Sprintf("for %q is not a duration", req.For)})
				return
			}
			ans.Scope = ScopeDuration
		}
		g, err = s.Answer(id, ans)
	case "deny":
		_, err = s.Answer(id, Answer{Approver: approver})
	case "revoke":
		err = s.Revoke(id, approver)
	default:
		writeJSON(w, http.StatusNotFound, apiError{Error: "unknown action; use grant, deny or revoke"})
		return
	}
	switch {
	case errors.Is(err, ErrNotFound):
		writeJSON(w, http.StatusNotFound, apiError{Error: err.Error()})
	case errors.Is(err, ErrAnswered), errors.Is(err, ErrScope):
		writeJSON(w, http.StatusConflict, apiError{Error: err.Error()})
	case err != nil:
		writeJSON(w, http.StatusInternalServerError, apiError{Error: err.Error()})
	default:
		writeJSON(w, http.StatusOK, g)
	}
}

// readGrant reads a grant request; an empty body is a once grant.
func readGrant(w http.ResponseWriter, r *http.Request) (grantRequest, error) {
	var req grantRequest
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 4096))
	if err != nil || len(bytes.TrimSpace(raw)) == 0 {
		return req, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return req, dec.Decode(&req)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
