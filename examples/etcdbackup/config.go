package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/minio/minio-go/v7/pkg/credentials"
	"go.yaml.in/yaml/v3"

	"github.com/etcdbackup/etcdbackup/destination"
)

// config is the YAML file that names destinations.
type config struct {
	// Default names the destination used when --destination is omitted.
	// Empty means the one named "default", or the only one.
	Default      string                       `yaml:"default"`
	Destinations map[string]destinationConfig `yaml:"destinations"`

	// dir is the file's directory: relative key file names are read from
	// there.
	dir string
}

type destinationConfig struct {
	URL         string             `yaml:"url"`
	ReadOnly    bool               `yaml:"readOnly"`
	Credentials *credentialsConfig `yaml:"credentials"`
	// CAFile names a PEM file of the authorities that signed an S3
	// endpoint's certificate, when they are private; relative to the
	// config file's directory.
	CAFile string `yaml:"caFile"`
}

// credentialsConfig holds an S3 destination's keys, or the file of its
// secret key. The file is read each time the destination is opened, so a
// rotated key is picked up by the next command.
type credentialsConfig struct {
	AccessKeyID         string `yaml:"accessKeyID"`
	SecretAccessKey     string `yaml:"secretAccessKey"`
	SecretAccessKeyFile string `yaml:"secretAccessKeyFile"`
}

// loadConfig reads and checks a config file. Its errors are usage errors
// and never hold a key.
func loadConfig(path string) (*config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, invalidInput(fmt.Errorf("config file: %w", err))
	}
	cfg, err := parseConfig(raw)
	if err != nil {
		return nil, invalidInput(fmt.Errorf("config file %s: %w", path, err))
	}
	if abs, err := filepath.Abs(path); err == nil {
		cfg.dir = filepath.Dir(abs)
	}
	return cfg, nil
}

// yamlValue matches the values YAML errors quote (" `...`"), which may be
// keys written in the wrong place.
var yamlValue = regexp.MustCompile(" `[^`]*`")

// yamlTypeError matches what YAML says of a value of the wrong type:
// "cannot unmarshal !!str into main.credentialsConfig".
var yamlTypeError = regexp.MustCompile(`cannot unmarshal (!!\w+) into (\S+)`)

// yamlTypes rewrites YAML's type errors in the config's words: the Go
// types behind the file are not the reader's business.
func yamlTypes(msg string) string {
	tags := map[string]string{"!!str": "a string", "!!seq": "a list", "!!map": "a mapping", "!!int": "a number",
		"!!float": "a number", "!!bool": "true or false", "!!null": "nothing"}
	want := map[string]string{
		"main.config": "the config's fields (default, destinations)", "map[string]main.destinationConfig": "a mapping of destination names",
		"main.destinationConfig": "a destination's fields (url, readOnly, credentials, caFile)",
		"main.credentialsConfig": "the credentials' fields (accessKeyID, secretAccessKey or secretAccessKeyFile)",
		"string":                 "a string", "bool": "true or false", "int": "a number", "int64": "a number",
	}
	return yamlTypeError.ReplaceAllStringFunc(msg, func(m string) string {
		sub := yamlTypeError.FindStringSubmatch(m)
		got, ok := tags[sub[1]]
		if !ok {
			got = "a value"
		}
		w, ok := want[sub[2]]
		if !ok {
			w = "a value of another kind"
		}
		return fmt.Sprintf("found %s where the config wants %s", got, w)
	})
}

// parseConfig decodes a config strictly: unknown fields, duplicate keys and
// a second document are errors.
func parseConfig(raw []byte) (*config, error) {
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	var cfg config
	if err := dec.Decode(&cfg); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("is empty")
		}
		var te *yaml.TypeError
		if errors.As(err, &te) {
			return nil, errors.New(yamlTypes(yamlValue.ReplaceAllString(strings.Join(te.Errors, "; "), "")))
		}
		return nil, errors.New(yamlValue.ReplaceAllString(err.Error(), ""))
	}
	var extra any
	if err := dec.Decode(&extra); err == nil {
		return nil, errors.New("holds more than one YAML document")
	}
	return &cfg, cfg.validate()
}

func (c *config) validate() error {
	if len(c.Destinations) == 0 {
		return errors.New("no destinations")
	}
	var errs []error
	for _, name := range c.names() {
		d := c.Destinations[name]
		if d.URL == "" {
			errs = append(errs, fmt.Errorf("destination %q: no url", name))
		}
		if cr := d.Credentials; cr != nil {
			switch {
			case cr.AccessKeyID == "":
				errs = append(errs, fmt.Errorf("destination %q: credentials without accessKeyID", name))
			case (cr.SecretAccessKey == "") == (cr.SecretAccessKeyFile == ""):
				errs = append(errs, fmt.Errorf("destination %q: credentials need one of secretAccessKey and secretAccessKeyFile", name))
			}
		}
	}
	if c.Default != "" {
		if _, ok := c.Destinations[c.Default]; !ok {
			errs = append(errs, fmt.Errorf("default %q is not one of the destinations", c.Default))
		}
	} else if _, err := c.defaultName(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (c *config) names() []string {
	names := make([]string, 0, len(c.Destinations))
	for n := range c.Destinations {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// desired maps the file onto the registry's destinations. A destination
// with credentials gets them from the file through secrets, under a secret
// named after itself; the others use the S3 default chain.
func (c *config) desired() destination.Desired {
	var d destination.Desired
	for _, name := range c.names() {
		dc := c.Destinations[name]
		spec := destination.Spec{Name: name, URL: dc.URL, ReadOnly: dc.ReadOnly, CACertFile: c.path(dc.CAFile)}
		if dc.Credentials != nil {
			spec.Credentials = destination.Credentials{Source: destination.SourceSecret, Secret: name}
		}
		d.Destinations = append(d.Destinations, spec)
	}
	d.Default = c.Default
	return d
}

// path resolves a file name of the config file against its directory.
func (c *config) path(file string) string {
	if file != "" && !filepath.IsAbs(file) && c.dir != "" {
		return filepath.Join(c.dir, file)
	}
	return file
}

// secrets resolves the credentials of the file's destinations.
func (c *config) secrets() destination.SecretResolver {
	return destination.SecretResolverFunc(func(_ context.Context, _, secret string) (*credentials.Credentials, error) {
		dc, ok := c.Destinations[secret]
		if !ok || dc.Credentials == nil {
			return nil, fmt.Errorf("no credentials for destination %q in the config file", secret)
		}
		keys := destination.Keys{AccessKey: dc.Credentials.AccessKeyID, SecretKey: dc.Credentials.SecretAccessKey}
		if file := c.path(dc.Credentials.SecretAccessKeyFile); file != "" {
			b, err := os.ReadFile(file)
			if err != nil {
				var pe *os.PathError
				if errors.As(err, &pe) {
					err = pe.Err
				}
				return nil, fmt.Errorf("read secretAccessKeyFile %s: %w", file, err)
			}
			if keys.SecretKey = strings.TrimSpace(string(b)); keys.SecretKey == "" {
				return nil, fmt.Errorf("secretAccessKeyFile %s is empty", file)
			}
		}
		return keys.Credentials(), nil
	})
}

// defaultName returns the destination used when none is named, chosen as
// the registry chooses it.
func (c *config) defaultName() (string, error) {
	if c.Default != "" {
		return c.Default, nil
	}
	if _, ok := c.Destinations[destination.DefaultName]; ok {
		return destination.DefaultName, nil
	}
	if len(c.Destinations) == 1 {
		return c.names()[0], nil
	}
	return "", errors.New("no default destination: set default")
}
