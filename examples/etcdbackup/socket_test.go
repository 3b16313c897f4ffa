package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/internal/servertest"
)

// TestSaveToReceiver sends a save and an export to `receive` over TCP,
// and verifies what it stored; a TLS receiver refuses a sender expecting
// another server name.
func TestSaveToReceiver(t *testing.T) {
	tr := &transcript{t: t}
	dir := t.TempDir()
	src := etcdtest.Start(t)
	from := "--endpoints=" + strings.Join(src.Endpoints(), ",")
	_, err := src.Client(t).Put(t.Context(), "/registry/a", "1")
	require.NoError(t, err)

	receive := func(name string, extra ...string) string {
		store := filepath.Join(dir, name)
		require.NoError(t, os.Mkdir(store, 0o700))
		addr := servertest.FreeAddr(t)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan int)
		var stderr bytes.Buffer
		go func() {
			done <- run(ctx, append([]string{"receive", "--listen=" + addr, "--destination=file://" + store}, extra...), strings.NewReader(""), &bytes.Buffer{}, &stderr)
		}()
		t.Cleanup(func() {
			cancel()
			require.Equal(t, exitOK, <-done, stderr.String())
		})
		// Wait for the listener, at most 30 s.
		deadline := time.Now().Add(30 * time.Second)
		for {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				c.Close()
				break
			}
			require.True(t, time.Now().Before(deadline), "receiver never listened: %v", err)
			time.Sleep(10 * time.Millisecond)
		}
		return addr
	}

	addr := receive("plain")
	id := tr.ok("save", from, "--destination=tcp://"+addr, "--cluster=prod", "--quiet").lastLine()
	exported := tr.ok("export", from, "--destination=tcp://"+addr, "--cluster=prod", "--type=keys", "--quiet").lastLine()
	stored := "--destination=file://" + filepath.Join(dir, "plain")
	tr.ok("verify", stored, "--cluster=prod", "--backup="+id)
	listed := listJSON(t, tr, stored, "--cluster=prod")
	require.Len(t, listed, 2)
	require.Equal(t, exported, listed[1]["id"])
	tr.fails(exitUsage, "save", from, "--destination=tcp://"+addr+"/path", "--cluster=prod")

	ca := etcdtest.NewCA(t)
	server := ca.Issue(t, etcdtest.CertOptions{DNSNames: []string{"receiver.example"}})
	tlsAddr := receive("tls", "--socket-cert="+server.CertFile, "--socket-key="+server.KeyFile)
	tr.fails(exitFailure, "save", from, "--destination=tls://"+tlsAddr, "--cluster=prod", "--quiet",
		"--socket-ca="+ca.CertFile, "--socket-server-name=other.example")
	tr.ok("save", from, "--destination=tls://"+tlsAddr, "--cluster=prod", "--quiet",
		"--socket-ca="+ca.CertFile, "--socket-server-name=receiver.example")
	require.Len(t, listJSON(t, tr, "--destination=file://"+filepath.Join(dir, "tls"), "--cluster=prod"), 1)
}
