// Package faultproxy puts faults between the library and the servers of its
// integration tests: an HTTP proxy in front of MinIO that resets
// connections, answers 503 SlowDown, delays, or answers a
// CompleteMultipartUpload with a 200 whose body is an error; and a TCP
// proxy in front of etcd that drops a connection after a number of bytes.
//
// Faults are rules: a request predicate, an action and how many times the
// rule fires. Rules are checked in order; the first that matches and has
// shots left acts. Everything else passes through unchanged, Host header
// included, so S3 signatures stay valid.
package faultproxy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Action is what a rule does to a matching request.
type Action int

// The actions of an HTTP rule.
const (
	// ResetAfter reads Bytes of the request body, then resets the client's
	// connection (TCP RST), as a network fault mid-upload would.
	ResetAfter Action = iota + 1
	// SlowDown answers 503 with S3's SlowDown error, as a throttled store
	// does.
	SlowDown
	// Delay waits Delay before passing the request on.
	Delay
	// OKWithError answers 200 with an S3 <Error> body without passing the
	// request on: what S3 may answer to a CompleteMultipartUpload that
	// failed after the headers were sent.
	OKWithError
	// InternalError answers 500 InternalError.
	InternalError
	// LoseAnswer passes the request on, lets the server answer in full,
	// then resets the client's connection instead of relaying the answer:
	// the write happened, the client cannot know it.
	LoseAnswer
	// AccessDenied answers 403 AccessDenied, as a store does to a role
	// without the permission (s3:GetObjectRetention, say).
	AccessDenied
	// ConditionalConflict answers 409 ConditionalRequestConflict without
	// passing the request on: Amazon S3's answer to a conditional write
	// that raced another write or a delete of its key (MinIO answers 412
	// to the loser instead). A rule's Before hook can make the other
	// write land first.
	ConditionalConflict
)

// Rule is one fault.
type Rule struct {
	// Name identifies the rule in Fired.
	Name string
	// Match selects requests; nil matches every request.
	Match func(r *http.Request) bool
	// Action is what to do.
	Action Action
	// Bytes is the body bytes ResetAfter lets through.
	Bytes int64
	// Delay is the pause of a Delay rule.
	Delay time.Duration
	// Times is how many requests the rule acts on; 0 means every one.
	Times int
	// Before, if set, runs before the action, on the proxy's goroutine:
	// what another client does while the request is in flight.
	Before func()
}

// Request predicates for S3 calls.

// IsUploadPart matches an UploadPart request; part 0 matches any part.
func IsUploadPart(part int) func(*http.Request) bool {
	return func(r *http.Request) bool {
		q := r.URL.Query()
		return r.Method == http.MethodPut && q.Has("uploadId") &&
			(part == 0 || q.Get("partNumber") == fmt.Sprint(part))
	}
}

// IsCompleteMultipart matches a CompleteMultipartUpload request.
func IsCompleteMultipart(r *http.Request) bool {
	return r.Method == http.MethodPost && r.URL.Query().Has("uploadId")
}

// IsPutObject matches a single-request PutObject (not a part).
func IsPutObject(r *http.Request) bool {
	return r.Method == http.MethodPut && !r.URL.Query().Has("uploadId") && r.Header.Get("X-Amz-Copy-Source") == ""
}

// IsObjectCreation matches the S3 request that makes an object visible: a
// single-request PutObject or a CompleteMultipartUpload.
func IsObjectCreation(r *http.Request) bool { return IsPutObject(r) || IsCompleteMultipart(r) }

// IsAzureCommit matches the Azure Blob request that makes a blob visible: a
// Put Blob or a Put Block List.
func IsAzureCommit(r *http.Request) bool {
	q := r.URL.Query()
	return r.Method == http.MethodPut && !q.Has("restype") && (!q.Has("comp") || q.Get("comp") == "blocklist")
}

// IsGCSCommit matches the Cloud Storage JSON API request that makes an
// object visible: a single-request (multipart) upload, or the last chunk
// of a resumable one, whose Content-Range states the total size.
func IsGCSCommit(r *http.Request) bool {
	q := r.URL.Query()
	switch {
	case r.Method == http.MethodPost && q.Get("uploadType") == "multipart":
		return true
	case (r.Method == http.MethodPut || r.Method == http.MethodPost) && q.Has("upload_id"):
		cr := r.Header.Get("Content-Range")
		return cr != "" && !strings.HasSuffix(cr, "/*") && !strings.HasPrefix(cr, "bytes */")
	}
	return false
}

// IsWrite matches every request that writes: PUT and POST.
func IsWrite(r *http.Request) bool { return r.Method == http.MethodPut || r.Method == http.MethodPost }

// HTTP is a fault-injecting reverse proxy.
type HTTP struct {
	srv    *http.Server
	ln     net.Listener
	target *url.URL
	proxy  *httputil.ReverseProxy

	targetHost atomic.Bool // see UseTargetHost
	// closed ends the delays still waiting when the test ends: a request
	// whose body was not read does not see its client go away.
	closed chan struct{}

	mu    sync.Mutex
	rules []*ruleState
	fired map[string]int
}

// UseTargetHost makes the proxy send the target's host:port as the Host
// of the requests it passes on, for servers that route by Host
// (fake-gcs-server reads another host as a bucket's) and clients that sign
// no Host.
func (p *HTTP) UseTargetHost() { p.targetHost.Store(true) }

type ruleState struct {
	Rule
	left int // shots left; <0 means unlimited
}

// StartHTTP starts a proxy to target (host:port, plain HTTP) on a free
// loopback port, stopped at the end of the test.
func StartHTTP(tb testing.TB, target string, rules ...Rule) *HTTP {
	tb.Helper()
	u := &url.URL{Scheme: "http", Host: target}
	p := &HTTP{target: u, fired: map[string]int{}, closed: make(chan struct{})}
	p.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			if !p.targetHost.Load() {
				pr.Out.Host = pr.In.Host // the client signed this host
			}
		},
		FlushInterval: -1,
		ErrorLog:      nil,
		// A server that names itself in a Location (the session URL of a
		// resumable upload) is named through the proxy instead, so that
		// the rest of the upload meets the faults too.
		ModifyResponse: func(resp *http.Response) error {
			if loc := resp.Header.Get("Location"); loc != "" && p.ln != nil {
				resp.Header.Set("Location", strings.Replace(loc, "//"+target+"/", "//"+p.Addr()+"/", 1))
			}
			return nil
		},
	}
	p.SetRules(rules...)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("listen: %v", err)
	}
	p.ln = ln
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	tb.Cleanup(func() {
		close(p.closed)
		_ = p.srv.Close()
	})
	return p
}

// Addr is the proxy's host:port, the endpoint to give the client.
func (p *HTTP) Addr() string { return p.ln.Addr().String() }

// SetRules replaces the rules.
func (p *HTTP) SetRules(rules ...Rule) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = p.rules[:0]
	for _, r := range rules {
		left := r.Times
		if left == 0 {
			left = -1
		}
		p.rules = append(p.rules, &ruleState{Rule: r, left: left})
	}
}

// LoseNextAnswer makes the proxy lose the answer of the next request that
// match selects (see LoseAnswer) and returns a function that reports
// whether it has. It replaces the rules.
func (p *HTTP) LoseNextAnswer(match func(*http.Request) bool) (fired func() bool) {
	name := fmt.Sprintf("lose answer %p", &match)
	p.SetRules(Rule{Name: name, Match: match, Action: LoseAnswer, Times: 1})
	return func() bool { return p.Fired()[name] > 0 }
}

// Fired returns how many times each rule has acted, by name.
func (p *HTTP) Fired() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]int, len(p.fired))
	for k, v := range p.fired {
		out[k] = v
	}
	return out
}

func (p *HTTP) pick(r *http.Request) *Rule {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, rs := range p.rules {
		if rs.left == 0 || (rs.Match != nil && !rs.Match(r)) {
			continue
		}
		if rs.left > 0 {
			rs.left--
		}
		p.fired[rs.Name]++
		rule := rs.Rule
		return &rule
	}
	return nil
}

// ServeHTTP implements http.Handler.
func (p *HTTP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rule := p.pick(r)
	if rule == nil {
		p.proxy.ServeHTTP(w, r)
		return
	}
	if rule.Before != nil {
		rule.Before()
	}
	switch rule.Action {
	case ResetAfter:
		_, _ = io.CopyN(io.Discard, r.Body, rule.Bytes)
		reset(w)
	case SlowDown:
		s3Error(w, http.StatusServiceUnavailable, "SlowDown", "Please reduce your request rate.")
	case InternalError:
		s3Error(w, http.StatusInternalServerError, "InternalError", "We encountered an internal error. Please try again.")
	case AccessDenied:
		s3Error(w, http.StatusForbidden, "AccessDenied", "Access Denied.")
	case ConditionalConflict:
		_, _ = io.Copy(io.Discard, r.Body)
		s3Error(w, http.StatusConflict, "ConditionalRequestConflict", "The conditional request cannot succeed due to a conflicting operation against this resource.")
	case OKWithError:
		_, _ = io.Copy(io.Discard, r.Body)
		s3Error(w, http.StatusOK, "InternalError", "We encountered an internal error. Please try again.")
	case LoseAnswer:
		p.proxy.ServeHTTP(discardResponse{h: http.Header{}}, r)
		reset(w)
	case Delay:
		select {
		case <-time.After(rule.Delay):
		case <-r.Context().Done():
			return
		case <-p.closed:
			reset(w)
			return
		}
		p.proxy.ServeHTTP(w, r)
	default:
		p.proxy.ServeHTTP(w, r)
	}
}

// discardResponse is a ResponseWriter that drops what the server answers.
type discardResponse struct{ h http.Header }

func (d discardResponse) Header() http.Header         { return d.h }
func (d discardResponse) Write(p []byte) (int, error) { return len(p), nil }
func (d discardResponse) WriteHeader(int)             {}

// reset closes the client's connection with a TCP RST.
func reset(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic("faultproxy: connection cannot be hijacked")
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

func s3Error(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	_, _ = fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>
<Error><Code>%s</Code><Message>%s</Message><RequestId>faultproxy</RequestId></Error>`, code, strings.ReplaceAll(msg, "<", ""))
}
