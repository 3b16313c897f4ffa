package main

import (
	"cmp"
	"context"
	"fmt"
	"strings"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/storage/blob"
	"github.com/etcdbackup/etcdbackup/storage/blob/azure"
	"github.com/etcdbackup/etcdbackup/storage/blob/gcs"
)

// openDestination opens the destination the flags select, in a registry
// the caller closes. A URL that is the location of a destination of the
// config file is that destination, with its name and credentials; any
// other URL is a destination named "default" with the S3 default chain.
// opts configures the registry (its logger, its upload buffers).
func openDestination(ctx context.Context, f *destinationFlags, opts destination.Options) (*destination.Registry, *destination.Destination, error) {
	var cfg *config
	if f.config != "" {
		var err error
		if cfg, err = loadConfig(f.config); err != nil {
			return nil, nil, err
		}
	}

	name := f.destination
	if strings.Contains(f.destination, "://") {
		loc, err := destination.ParseURL(f.destination)
		if err != nil {
			return nil, nil, invalidInput(err)
		}
		name = ""
		if cfg != nil {
			name = cfg.find(loc)
		}
		if name == "" {
			opts.Drivers = cloudDrivers()
			// The operator writes the CLI's destinations: any file,
			// variable or IAM endpoint it names is its own.
			opts.CredentialSources = destination.AnySource()
			reg, err := destination.NewRegistry(opts)
			if err != nil {
				return nil, nil, err
			}
			d, err := reg.Add(ctx, destination.Spec{Name: cmp.Or(f.name, destination.DefaultName), URL: f.destination})
			if err != nil {
				reg.Close()
				return nil, nil, fmt.Errorf("destination: %w", err)
			}
			return reg, d, nil
		}
	}

	if cfg == nil {
		if backup.ValidateName("destination", f.destination) != nil {
			// Neither a URL nor a name: it may hold anything, a secret
			// included, so it is not repeated.
			return nil, nil, usagef("--destination is neither a URL (scheme://...) nor a destination name")
		}
		return nil, nil, usagef("destination %q is not a URL: a destination name needs --config", f.destination)
	}
	if name == "" {
		var err error
		if name, err = cfg.defaultName(); err != nil {
			return nil, nil, invalidInput(fmt.Errorf("config file %s: %w", f.config, err))
		}
	}
	if _, ok := cfg.Destinations[name]; !ok {
		return nil, nil, usagef("config file %s has no destination %q", f.config, name)
	}
	reg, err := openRegistry(ctx, cfg, f.config, opts)
	if err != nil {
		return nil, nil, err
	}
	d, err := reg.Get(name)
	if err != nil {
		reg.Close()
		return nil, nil, err
	}
	return reg, d, nil
}

// cloudDrivers are the drivers of the clouds the CLI opens: every one.
// A host that uses one cloud passes its driver alone and links no other
// cloud's SDK.
func cloudDrivers() []blob.Driver {
	return []blob.Driver{gcs.Driver(), azure.Driver()}
}

// openRegistry returns a registry of every destination of cfg.
func openRegistry(ctx context.Context, cfg *config, path string, opts destination.Options) (*destination.Registry, error) {
	opts.Secrets = cfg.secrets()
	opts.Drivers = cloudDrivers()
	opts.CredentialSources = destination.AnySource()
	reg, err := destination.NewRegistry(opts)
	if err != nil {
		return nil, err
	}
	if _, err := reg.Apply(ctx, cfg.desired()); err != nil {
		reg.Close()
		// Apply checks every spec before it opens anything: its errors are
		// about the file.
		return nil, invalidInput(fmt.Errorf("config file %s: %w", path, err))
	}
	return reg, nil
}

// find returns the name of the destination at loc, or "".
func (c *config) find(loc destination.Location) string {
	for _, name := range c.names() {
		if l, err := destination.ParseURL(c.Destinations[name].URL); err == nil && l.String() == loc.String() {
			return name
		}
	}
	return ""
}
