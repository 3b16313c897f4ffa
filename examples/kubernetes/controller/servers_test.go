package controller_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/etcdbackup/etcdbackup/examples/kubernetes/controller"
)

// The real servers of the integration tests: kube-apiserver and its etcd
// (envtest, from KUBEBUILDER_ASSETS), MinIO (ETCDBACKUP_MINIO_BIN) and an
// embedded etcd whose data is backed up. A missing binary fails the test.

func scheme(t *testing.T) *runtime.Scheme {
	s := newScheme()
	if s == nil {
		t.Fatal("scheme")
	}
	return s
}

func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := controller.AddToScheme(s); err != nil {
		return nil
	}
	return s
}

// startAPIServer starts a kube-apiserver with the CRDs and the admission
// policy of config/, and stops it when the test ends.
func startAPIServer(t *testing.T) (*rest.Config, client.Client) {
	t.Helper()
	_, cfg, c := startEnv(t)
	return cfg, c
}

// startEnv is startAPIServer with the environment, whose control plane
// adds users.
func startEnv(t *testing.T) (*envtest.Environment, *rest.Config, client.Client) {
	t.Helper()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run make tools, then make test (it points it at .tools/kubebuilder/bin)")
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "config", "crd")},
		ErrorIfCRDPathMissing: true,
		Scheme:                scheme(t),
		// envtest's 20 s is not enough for kube-apiserver to answer on a
		// busy two-core machine: each of its five tries timed out.
		ControlPlaneStartTimeout: 2 * time.Minute,
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start kube-apiserver: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop kube-apiserver: %v", err)
		}
	})
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	applyAdmissionPolicy(t, c)
	return env, cfg, c
}

func applyAdmissionPolicy(t *testing.T, c client.Client) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "config", "admission", "protect-default.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	var policy admissionv1.ValidatingAdmissionPolicy
	var binding admissionv1.ValidatingAdmissionPolicyBinding
	for _, obj := range []client.Object{&policy, &binding} {
		if err := dec.Decode(obj); err != nil {
			t.Fatal(err)
		}
		if err := c.Create(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
	}
}

// minioServer is a MinIO process with random root keys.
type minioServer struct {
	addr, access, secret string
	client               *minio.Client
}

func startMinIO(t *testing.T) *minioServer {
	t.Helper()
	bin := os.Getenv("ETCDBACKUP_MINIO_BIN")
	if bin == "" {
		t.Fatal("ETCDBACKUP_MINIO_BIN is not set: run make tools, then make test")
	}
	s := &minioServer{addr: freeAddr(t), access: randomHex(t, 8), secret: randomHex(t, 16)}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "server", "--quiet", "--address", s.addr,
		"--console-address", freeAddr(t), t.TempDir())
	cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+s.access, "MINIO_ROOT_PASSWORD="+s.secret,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off", "MINIO_CI_CD=on")
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start minio: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://" + s.addr + "/minio/health/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case <-done:
			t.Fatalf("minio exited:\n%s", out.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("minio not ready:\n%s", out.String())
		}
	}
	var err error
	s.client, err = minio.New(s.addr, &minio.Options{Creds: credentials.NewStaticV4(s.access, s.secret, "")})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *minioServer) bucket(t *testing.T, name string) string {
	t.Helper()
	return s.newBucket(t, name, false)
}

// newBucket makes a bucket, with object lock enabled when locking is set,
// and returns its destination URL.
func (s *minioServer) newBucket(t *testing.T, name string, locking bool) string {
	t.Helper()
	if err := s.client.MakeBucket(t.Context(), name, minio.MakeBucketOptions{ObjectLocking: locking}); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("s3://%s?endpoint=%s&insecure=true", name, s.addr)
}

// keys lists the object keys under prefix.
func (s *minioServer) keys(t *testing.T, bucket, prefix string) []string {
	t.Helper()
	var keys []string
	for o := range s.client.ListObjects(t.Context(), bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		keys = append(keys, o.Key)
	}
	return keys
}

// startEtcd starts an embedded etcd in dir. peer, when set, is its peer
// URL; name is the member's name.
func startEtcd(t *testing.T, name, dir string, peer *url.URL) *embed.Etcd {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = name, dir
	client := &url.URL{Scheme: "http", Host: freeAddr(t)}
	if peer == nil {
		peer = &url.URL{Scheme: "http", Host: freeAddr(t)}
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
	cfg.InitialCluster = name + "=" + peer.String()
	cfg.UnsafeNoFsync = true
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		t.Fatal("etcd not ready")
	}
	return e
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func randomHex(t *testing.T, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
