package controller

import (
	"fmt"
	"testing"

	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/examples/kubernetes/api/v1alpha1"
	"github.com/etcdbackup/etcdbackup/schedule"
)

func TestCamel(t *testing.T) {
	for in, want := range map[string]string{
		"missing-bucket": "MissingBucket",
		"auth":           "Auth",
		"":               "Unknown",
		"a_b c":          "ABC",
	} {
		if got := camel(in); got != want {
			t.Errorf("camel(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRefusalReasons(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("destination x: %w", err) }
	for _, tc := range []struct {
		err        error
		dest, conf string
	}{
		{wrap(destination.ErrLocationInUse), "LocationInUse", "Error"},
		{wrap(destination.ErrCredentialsInURL), "CredentialsInURL", "Error"},
		{wrap(destination.ErrNotFound), "Error", "DestinationNotFound"},
		{wrap(destination.ErrReadOnly), "Error", "DestinationReadOnly"},
		{wrap(schedule.ErrInvalidJob), "Error", "InvalidJob"},
		{wrap(errTornDown), "Error", "ClusterDeleted"},
	} {
		if got := refusalReason(tc.err); got != tc.dest {
			t.Errorf("refusalReason(%v) = %s, want %s", tc.err, got, tc.dest)
		}
		if got := configRefusal(tc.err); got != tc.conf {
			t.Errorf("configRefusal(%v) = %s, want %s", tc.err, got, tc.conf)
		}
	}
}

func TestEtcdConfig(t *testing.T) {
	plain := etcdConfig(&v1alpha1.EtcdClusterSpec{Endpoints: []string{"http://a:2379"}})
	if plain.TLS != nil || len(plain.Endpoints) != 1 {
		t.Errorf("plain: %v", plain)
	}
	tls := etcdConfig(&v1alpha1.EtcdClusterSpec{Endpoints: []string{"https://a:2379"},
		TLS: &v1alpha1.EtcdTLS{CAFile: "/certs/ca.crt", CertFile: "/certs/tls.crt", KeyFile: "/certs/tls.key", ServerName: "etcd"}})
	if tls.TLS == nil || tls.TLS.TrustedCAFile != "/certs/ca.crt" || tls.TLS.CertFile != "/certs/tls.crt" ||
		tls.TLS.KeyFile != "/certs/tls.key" || tls.TLS.ServerName != "etcd" {
		t.Errorf("tls: %+v", tls.TLS)
	}
}
