package destination

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// CredentialSources is what the specs of a registry may name as the place
// of their credentials: files, environment variables and an IAM endpoint.
// Whatever a spec names is read by the process and sent to the endpoint
// the same spec names, so the host decides (Options.CredentialSources).
//
// The zero value allows none of them: specs may still use secrets
// (SourceSecret), the default chain, the IAM role of the process (at its
// standard endpoints), the standard AWS_* variables (SourceEnv without
// names) and anonymous access. That is the right default for a host that
// takes specs from authors it trusts less than itself, such as a
// Kubernetes controller whose tenants write them. A host whose operator
// writes the specs (a CLI, a configuration file) may allow everything
// with AnySource.
type CredentialSources struct {
	// Dirs are the directories under which a spec may name credential
	// files (SourceFiles, SourceAWSFiles): absolute, and "/" allows every
	// file. A path must be absolute, hold no ".." element and, with its
	// symbolic links resolved as they are when the spec is validated,
	// lie in one of them.
	Dirs []string
	// Env are the environment variables a spec may name (SourceEnv's
	// *Env fields). A name ending in '*' allows every variable with that
	// prefix; "*" allows every variable.
	Env []string
	// IAMEndpoint lets specs set Credentials.IAMEndpoint, the endpoint
	// that receives the process's web identity token.
	IAMEndpoint bool
}

// AnySource allows every file, variable and IAM endpoint: for hosts whose
// operator writes the specs.
func AnySource() CredentialSources {
	return CredentialSources{Dirs: []string{"/"}, Env: []string{"*"}, IAMEndpoint: true}
}

// validate checks the sources themselves.
func (a CredentialSources) validate() error {
	for _, d := range a.Dirs {
		if !filepath.IsAbs(d) {
			return fmt.Errorf("credential sources: directory %s is not absolute", quote(d))
		}
	}
	return nil
}

// check reports a file, variable or IAM endpoint c names that a does not
// allow. Errors name the field, never a file's content.
func (a CredentialSources) check(c Credentials) error {
	if c.IAMEndpoint != "" && !a.IAMEndpoint {
		return errors.New("this host does not let specs name an IAM endpoint (Options.CredentialSources)")
	}
	for field, name := range map[string]string{"access key variable": c.AccessKeyEnv, "secret key variable": c.SecretKeyEnv, "session token variable": c.SessionTokenEnv} {
		if name != "" && !a.envAllowed(name) {
			return fmt.Errorf("this host does not let specs name the %s %s (Options.CredentialSources)", field, quote(name))
		}
	}
	for field, file := range map[string]string{"access key file": c.AccessKeyFile, "secret key file": c.SecretKeyFile,
		"session token file": c.SessionTokenFile, "AWS credentials file": c.AWSCredentialsFile, "AWS config file": c.AWSConfigFile} {
		if file == "" {
			continue
		}
		if err := inDirs(file, a.Dirs); err != nil {
			return fmt.Errorf("%s %s: %w", field, quote(file), err)
		}
	}
	return nil
}

func (a CredentialSources) envAllowed(name string) bool {
	return slices.ContainsFunc(a.Env, func(p string) bool {
		prefix, wild := strings.CutSuffix(p, "*")
		return p == name || wild && strings.HasPrefix(name, prefix)
	})
}

// inDirs reports whether file lies in one of dirs, with its symbolic links
// resolved as they are now.
func inDirs(file string, dirs []string) error {
	if !filepath.IsAbs(file) {
		return errors.New("not an absolute path")
	}
	if slices.Contains(strings.Split(filepath.ToSlash(file), "/"), "..") {
		return errors.New("a '..' element is not allowed")
	}
	if len(dirs) == 0 {
		return errors.New("this host does not let specs name files (Options.CredentialSources)")
	}
	real := filepath.Clean(file)
	if r, err := filepath.EvalSymlinks(real); err == nil {
		real = r
	}
	for _, d := range dirs {
		d = filepath.Clean(d)
		if r, err := filepath.EvalSymlinks(d); err == nil {
			d = r
		}
		if d == string(filepath.Separator) || real == d || strings.HasPrefix(real, d+string(filepath.Separator)) {
			return nil
		}
	}
	return errors.New("outside the directories this host lets specs name (Options.CredentialSources)")
}
