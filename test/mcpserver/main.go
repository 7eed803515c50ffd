// Command mcpserver is a small real MCP server and client (the official Go SDK,
// github.com/modelcontextprotocol/go-sdk, JSON-RPC over streamable HTTP) for the end-to-end
// test of an MCP server run as an identity of a sandbox (issue 34, test/e2e/sandbox_mcp_test.go).
//
//	mcpserver serve -listen 127.0.0.1:0 -token-env NAME
//
// serves one tool, fetch {url}: a GET of url through the proxy of the environment
// (HTTPS_PROXY, SSL_CERT_FILE), with "Authorization: Bearer $NAME" as a GitHub MCP server
// sends its token. It prints "listening ADDR PID" once it accepts, and exits when its stdin
// closes. With -stdio it speaks MCP over its stdin and stdout instead (the stdio transport).
//
//	mcpserver call -endpoint URL -url U
//	mcpserver call -spawn -token-env NAME -url U
//
// connects to the server at URL as an MCP client (with -spawn: starts `mcpserver serve -stdio`
// as its own child, as an agent starts a stdio MCP server), calls fetch {url: U} and prints the result
// as one JSON object {"isError": bool, "text": "..."}; it exits non-zero only when the MCP
// exchange itself fails (a refused fetch is a tool error, isError true).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: mcpserver serve|call [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "call":
		err = call(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q (serve, call)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mcpserver:", err)
		os.Exit(1)
	}
}

// fetchArgs are the fetch tool's arguments.
type fetchArgs struct {
	URL string `json:"url" jsonschema:"the URL to GET"`
}

// maxBody bounds what the tool reads of an answer.
const maxBody = 1 << 20

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on")
	tokenEnv := fs.String("token-env", "", "environment variable holding the token (a placeholder in a sandbox)")
	stdio := fs.Bool("stdio", false, "speak MCP over stdin and stdout instead of listening")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *tokenEnv == "" || os.Getenv(*tokenEnv) == "" {
		return fmt.Errorf("-token-env: the variable %q is unset or empty", *tokenEnv)
	}
	client := &http.Client{Timeout: 30 * time.Second} // the default transport: proxy from the environment
	server := mcp.NewServer(&mcp.Implementation{Name: "airlock-test-fetch", Version: "v0.1.0"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "fetch", Description: "GET a URL with the server's token"},
		func(ctx context.Context, _ *mcp.CallToolRequest, in fetchArgs) (*mcp.CallToolResult, any, error) {
			return fetch(ctx, client, in.URL, os.Getenv(*tokenEnv)), nil, nil
		})
	if *stdio {
		return server.Run(context.Background(), &mcp.StdioTransport{})
	}
	return serveHTTP(server, *listen)
}

// serveHTTP serves server over streamable HTTP on listen until stdin closes.
func serveHTTP(server *mcp.Server, listen string) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", listen, err)
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	fmt.Printf("listening %s %d\n", ln.Addr(), os.Getpid())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		_ = srv.Close()
	}()
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// fetch GETs url with the token and returns the answer as the tool's result: "status N" and
// the body, a tool error unless the status is 2xx.
func fetch(ctx context.Context, client *http.Client, url, token string) *mcp.CallToolResult {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return toolError(fmt.Sprintf("fetch: %v", err))
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return toolError(fmt.Sprintf("fetch %s: %v", url, err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return toolError(fmt.Sprintf("fetch %s: read the body: %v", url, err))
	}
	text := fmt.Sprintf("status %d\n%s", resp.StatusCode, body)
	if resp.StatusCode/100 != 2 {
		return toolError(text)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

func toolError(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

// callResult is what call prints.
type callResult struct {
	IsError bool   `json:"isError"`
	Text    string `json:"text"`
}

func call(args []string) error {
	fs := flag.NewFlagSet("call", flag.ContinueOnError)
	endpoint := fs.String("endpoint", "", "the server's streamable HTTP endpoint")
	spawn := fs.Bool("spawn", false, "start the server as a child speaking stdio instead of connecting to -endpoint")
	tokenEnv := fs.String("token-env", "", "with -spawn: the child's -token-env")
	url := fs.String("url", "", "the fetch tool's url argument")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "airlock-test-agent", Version: "v0.1.0"}, nil)
	var transport mcp.Transport = &mcp.StreamableClientTransport{Endpoint: *endpoint, DisableStandaloneSSE: true, MaxRetries: -1}
	if *spawn {
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find this program to spawn: %w", err)
		}
		transport = &mcp.CommandTransport{Command: exec.Command(self, "serve", "-stdio", "-token-env", *tokenEnv)}
	}
	cs, err := client.Connect(ctx, transport, nil)
	if err != nil {
		return fmt.Errorf("connect to the MCP server: %w", err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fetch", Arguments: fetchArgs{URL: *url}})
	if err != nil {
		return fmt.Errorf("call fetch: %w", err)
	}
	var text strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text.WriteString(tc.Text)
		}
	}
	return json.NewEncoder(os.Stdout).Encode(callResult{IsError: res.IsError, Text: text.String()})
}
