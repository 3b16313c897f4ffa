package main

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.yaml.in/yaml/v3"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/retention"
	"github.com/etcdbackup/etcdbackup/schedule"
)

// seedConfig is the part of a seed's configuration this controller
// watches: where backups go (the seed's backupRestore section) and what
// to back up (its EtcdBackupConfigs).
type seedConfig struct {
	BackupRestore backupRestore  `yaml:"backupRestore"`
	BackupConfigs []backupConfig `yaml:"backupConfigs"`
}

type backupRestore struct {
	// S3Endpoint, S3BucketName and S3Credentials are the deprecated single
	// destination: it becomes the destination "default".
	S3Endpoint    string         `yaml:"s3Endpoint"`
	S3BucketName  string         `yaml:"s3BucketName"`
	S3Credentials credentialsRef `yaml:"s3Credentials"`

	// DefaultDestination is used by backup configs that name none.
	DefaultDestination string                           `yaml:"defaultDestination"`
	BackupDestinations map[string]backupDestinationSpec `yaml:"backupDestinations"`
}

// backupDestinationSpec is a destination as a URL, or as the S3 fields of
// configurations that predate URLs. Credentials say where the keys are,
// never what they are.
type backupDestinationSpec struct {
	URL         string         `yaml:"url"`
	Endpoint    string         `yaml:"endpoint"`
	BucketName  string         `yaml:"bucketName"`
	Prefix      string         `yaml:"prefix"`
	Region      string         `yaml:"region"`
	Credentials credentialsRef `yaml:"credentials"`
	ReadOnly    bool           `yaml:"readOnly"`
	// CAFile names a PEM file of the authorities that signed the S3
	// endpoint's certificate, when they are private.
	CAFile string `yaml:"caFile"`
}

// credentialsRef is destination.Credentials as the file spells it.
type credentialsRef struct {
	// Source is secret, files, env, iam or anonymous; empty means the S3
	// default chain.
	Source string `yaml:"source"`
	// Secret names a Kubernetes-style secret, "namespace/name".
	Secret           string `yaml:"secret"`
	AccessKeyFile    string `yaml:"accessKeyFile"`
	SecretKeyFile    string `yaml:"secretKeyFile"`
	SessionTokenFile string `yaml:"sessionTokenFile"`
	AccessKeyEnv     string `yaml:"accessKeyEnv"`
	SecretKeyEnv     string `yaml:"secretKeyEnv"`
	// Revision changes when the secret's content does (a Secret's
	// resourceVersion): the registry then reopens the destination with
	// the new keys.
	Revision string `yaml:"revision"`
}

func (c credentialsRef) credentials() destination.Credentials {
	return destination.Credentials{
		Source: destination.CredentialsSource(c.Source), Secret: c.Secret,
		AccessKeyFile: c.AccessKeyFile, SecretKeyFile: c.SecretKeyFile, SessionTokenFile: c.SessionTokenFile,
		AccessKeyEnv: c.AccessKeyEnv, SecretKeyEnv: c.SecretKeyEnv, Revision: c.Revision,
	}
}

// backupConfig is one EtcdBackupConfig: a cluster's etcd, when to back it
// up, where to and how many backups to keep.
type backupConfig struct {
	Name        string     `yaml:"name"`
	Cluster     string     `yaml:"cluster"`
	Endpoints   []string   `yaml:"endpoints"`
	TLS         *tlsConfig `yaml:"tls"`
	Destination string     `yaml:"destination"`
	Schedule    string     `yaml:"schedule"`
	Keep        int        `yaml:"keep"`
	// Recipients are age public keys to encrypt the backups to.
	Recipients []string `yaml:"recipients"`
	// Type is snapshot (the default), keys-json (a logical backup of the
	// keys under Prefixes, kept by its own count) or keys (the same as a
	// zip with one file per key).
	Type     string   `yaml:"type"`
	Prefixes []string `yaml:"prefixes"`
	// PointInTimeWindow, a duration such as 72h, also backs the cluster
	// up continuously: every revision of that window stays restorable.
	PointInTimeWindow string `yaml:"pointInTimeWindow"`
	// CompactInterval, a duration such as 1h, compacts that continuous
	// backup's chain into a synthetic full backup that often
	// (schedule.Continuous.CompactInterval); only with PointInTimeWindow.
	CompactInterval string `yaml:"compactInterval"`
}

type tlsConfig struct {
	CAFile     string `yaml:"caFile"`
	CertFile   string `yaml:"certFile"`
	KeyFile    string `yaml:"keyFile"`
	ServerName string `yaml:"serverName"`
}

// parseConfig decodes the file strictly: unknown fields and duplicate
// keys are errors, so that a misspelt field is not silently ignored.
func parseConfig(raw []byte) (*seedConfig, error) {
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	var cfg seedConfig
	if err := dec.Decode(&cfg); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			return nil, errors.New(strings.Join(te.Errors, "; "))
		}
		return nil, err
	}
	seen := map[string]bool{}
	for _, bc := range cfg.BackupConfigs {
		if seen[bc.id()] {
			return nil, fmt.Errorf("backup config %s given twice", bc.id())
		}
		seen[bc.id()] = true
	}
	return &cfg, nil
}

// desired maps the seed's destinations onto the registry's desired set,
// the deprecated fields included.
func (c *seedConfig) desired() (destination.Desired, error) {
	br := c.BackupRestore
	d := destination.Desired{Default: br.DefaultDestination}
	for name, s := range br.BackupDestinations {
		d.Destinations = append(d.Destinations, destination.Spec{
			Name: name, URL: s.URL, Endpoint: s.Endpoint, Bucket: s.BucketName, Prefix: s.Prefix, Region: s.Region,
			Credentials: s.Credentials.credentials(), ReadOnly: s.ReadOnly, CACertFile: s.CAFile,
		})
	}
	slices.SortFunc(d.Destinations, func(a, b destination.Spec) int { return cmp.Compare(a.Name, b.Name) })
	legacy := destination.LegacyConfig{S3Endpoint: br.S3Endpoint, S3BucketName: br.S3BucketName, Credentials: br.S3Credentials.credentials()}
	return legacy.Merge(d)
}

// id is the job ID of a backup config, "<cluster>/<name>", as a
// controller would use "<namespace>/<name>" of the object.
func (bc backupConfig) id() string { return bc.Cluster + "/" + bc.Name }

// libraryConfig is the backup config in the registry's terms, which
// ValidateBackupConfig checks.
func (bc backupConfig) libraryConfig() destination.BackupConfig {
	return destination.BackupConfig{Name: bc.Name, Cluster: bc.Cluster, Destination: bc.Destination, Schedule: bc.Schedule, Keep: bc.Keep}
}

// job returns the scheduler's job of a validated backup config.
func (bc backupConfig) job(valid destination.BackupConfig) schedule.Job {
	j := schedule.Job{
		ID:           bc.id(),
		Schedule:     valid.Schedule,
		Cluster:      valid.Cluster,
		Name:         valid.Name,
		Destinations: []string{valid.Destination},
		Compression:  backup.Zstd,
		Encryption:   backup.Encryption{Recipients: bc.Recipients},
	}
	if valid.Keep > 0 {
		j.Retention = retention.KeepLast(valid.Keep)
	}
	switch bc.Type {
	case "keys-json":
		j.Kind, j.Prefixes = backup.KindKeysJSON, bc.Prefixes
	case "keys":
		j.Kind, j.Prefixes = backup.KindKeys, bc.Prefixes
	}
	if w, err := time.ParseDuration(bc.PointInTimeWindow); err == nil {
		j.Continuous = &schedule.Continuous{Window: w}
		if every, err := time.ParseDuration(bc.CompactInterval); err == nil {
			j.Continuous.CompactInterval = every
		}
	}
	return j
}

// checkKind reports a type or a point-in-time window the job cannot have.
func (bc backupConfig) checkKind() error {
	switch bc.Type {
	case "", "snapshot", "keys-json", "keys":
	default:
		return fmt.Errorf("backup config %s: type %q is not snapshot, keys-json or keys", bc.id(), bc.Type)
	}
	if bc.PointInTimeWindow == "" {
		if bc.CompactInterval != "" {
			return fmt.Errorf("backup config %s: compactInterval needs a pointInTimeWindow", bc.id())
		}
		return nil
	}
	if _, err := time.ParseDuration(bc.PointInTimeWindow); err != nil {
		return fmt.Errorf("backup config %s: pointInTimeWindow: %w", bc.id(), err)
	}
	if bc.CompactInterval != "" {
		if _, err := time.ParseDuration(bc.CompactInterval); err != nil {
			return fmt.Errorf("backup config %s: compactInterval: %w", bc.id(), err)
		}
	}
	return nil
}

// etcd returns the snapshotter configuration of the config's cluster.
func (bc backupConfig) etcd() backup.EtcdConfig {
	cfg := backup.EtcdConfig{Endpoints: bc.Endpoints}
	if t := bc.TLS; t != nil {
		cfg.TLS = &transport.TLSInfo{TrustedCAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile, ServerName: t.ServerName}
	}
	return cfg
}
