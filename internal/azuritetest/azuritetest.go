// Package azuritetest runs Azurite, the Azure Storage emulator, for
// integration tests of the azblob:// driver.
//
// Start launches the blob service `make tools` installed (with npm, from the
// package.json and package-lock.json next to this file) on a free loopback
// port with in-memory storage, waits until it serves, and stops it when the
// test ends. A missing installation fails the test: integration tests in
// this module never skip.
//
//	srv := azuritetest.Start(t)
//	c := srv.NewContainer(t)
//	b, err := azureblob.OpenBucket(ctx, c, nil)
//
// The executable is found through the ETCDBACKUP_AZURITE_BIN environment
// variable, or else at .tools/azurite/node_modules/.bin/azurite-blob under
// the module root.
package azuritetest

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/etcdbackup/etcdbackup/internal/servertest"
)

// BinEnv names the environment variable that overrides the executable's
// location.
const BinEnv = "ETCDBACKUP_AZURITE_BIN"

// Account and Key are Azurite's well-known development account, documented
// by Azurite and valid on no real storage account.
const (
	Account = "devstoreaccount1"
	Key     = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

const startTimeout = 60 * time.Second

// Server is a running Azurite blob service. Its methods are safe for
// concurrent use.
type Server struct {
	addr       string
	cred       *azblob.SharedKeyCredential
	containers atomic.Int64
}

// Start launches the emulator and registers its shutdown with tb.Cleanup.
func Start(tb testing.TB) *Server {
	tb.Helper()
	bin := servertest.Binary(tb, "azuritetest", BinEnv,
		filepath.Join(".tools", "azurite", "node_modules", ".bin", "azurite-blob"))
	cred, err := azblob.NewSharedKeyCredential(Account, Key)
	if err != nil {
		tb.Fatalf("azuritetest: %v", err)
	}
	s := &Server{cred: cred}
	dir := tb.TempDir()
	s.addr = servertest.StartOnFreePort(tb, "azuritetest", startTimeout, func(addr string) *exec.Cmd {
		cmd := exec.Command(bin,
			"--blobHost", "127.0.0.1",
			"--blobPort", servertest.Port(addr),
			"--inMemoryPersistence",
			"--skipApiVersionCheck",
			"--disableTelemetry",
			"--silent")
		cmd.Dir = dir // in memory, but nothing may land in the package's directory
		return cmd
	}, func(addr string) func() error {
		// Any answer means the service is up: an anonymous request to the
		// account gets 4xx.
		return servertest.HTTPReady("http://" + addr + "/" + Account + "/")
	})
	return s
}

// ServiceURL returns the blob service URL of the development account.
func (s *Server) ServiceURL() string { return "http://" + s.addr + "/" + Account + "/" }

// Endpoint returns the service's host:port.
func (s *Server) Endpoint() string { return s.addr }

// Credential returns the development account's shared key.
func (s *Server) Credential() *azblob.SharedKeyCredential { return s.cred }

// NewContainer creates a container with a name unique to this call and
// returns a client for it.
func (s *Server) NewContainer(tb testing.TB) *container.Client {
	tb.Helper()
	name := fmt.Sprintf("test-%03d", s.containers.Add(1))
	c, err := container.NewClientWithSharedKeyCredential(s.ServiceURL()+name, s.cred, nil)
	if err != nil {
		tb.Fatalf("azuritetest: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Create(ctx, nil); err != nil {
		tb.Fatalf("azuritetest: create container %s: %v", name, err)
	}
	return c
}
