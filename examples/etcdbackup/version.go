package main

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"go.etcd.io/etcd/api/v3/version"

	"github.com/etcdbackup/etcdbackup/backup"
)

// versions is what version prints.
type versions struct {
	Etcdbackup string `json:"etcdbackup"`
	Go         string `json:"go"`
	EtcdClient string `json:"etcdClient"`
}

func runVersion(_ context.Context, s *streams, args []string) error {
	fs := newFlagSet("version", "[--output=text|json]")
	var output string
	fs.StringVar(&output, "output", "text", "text or json")
	if err := fs.parse(s, args); err != nil {
		return err
	}
	v := versions{Etcdbackup: strings.TrimPrefix(backup.LibraryVersion(), "etcdbackup "), Go: runtime.Version(), EtcdClient: etcdClientVersion()}
	switch output {
	case "json":
		return json.NewEncoder(s.stdout).Encode(v)
	case "text":
		_, err := fmt.Fprintf(s.stdout, "etcdbackup %s\ngo %s\netcd client %s\n", v.Etcdbackup, v.Go, v.EtcdClient)
		return err
	}
	return usagef("--output %q: want text or json", output)
}

// etcdClientVersion is the version of the etcd client module linked in,
// else the API version it speaks.
func etcdClientVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, m := range info.Deps {
			if m.Path == "go.etcd.io/etcd/client/v3" {
				return m.Version
			}
		}
	}
	return version.Version
}
