package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/etcdbackup/etcdbackup/destination"
)

// checkedDestination is one line of `destinations --output=json`.
type checkedDestination struct {
	Name     string `json:"name"`
	Default  bool   `json:"default"`
	URL      string `json:"url"`
	ReadOnly bool   `json:"readOnly"`
	State    string `json:"state"`
	Reason   string `json:"reason,omitempty"`
	Message  string `json:"message,omitempty"`
}

func runDestinations(ctx context.Context, s *streams, args []string) error {
	fs := newFlagSet("destinations", "--config=FILE [--output=table|json] [--timeout=DURATION]")
	var (
		path, output string
		timeout      time.Duration
	)
	fs.StringVar(&path, "config", "", "YAML `file` naming destinations (default $ETCDBACKUP_CONFIG, else $XDG_CONFIG_HOME/etcdbackup/config.yaml if it exists)")
	fs.StringVar(&output, "output", "table", "table or json")
	fs.DurationVar(&timeout, "timeout", destination.DefaultCheckTimeout, "bound on each destination's check")
	if err := fs.parse(s, args); err != nil {
		return err
	}
	if path == "" {
		path = defaultConfig()
	}
	if path == "" {
		return usagef("--config is required")
	}
	if output != "table" && output != "json" {
		return usagef("--output %q: want table or json", output)
	}
	if timeout <= 0 {
		return usagef("--timeout must be positive")
	}
	cfg, err := loadConfig(path)
	if err != nil {
		return err
	}
	reg, err := openRegistry(ctx, cfg, path, destination.Options{Logger: fs.logger(s), CheckTimeout: timeout})
	if err != nil {
		return err
	}
	defer reg.Close()
	def, err := reg.Default()
	if err != nil {
		return err
	}

	// One check each, all at once: a slow destination costs one timeout,
	// not one per destination after it.
	dests := reg.List()
	out := make([]checkedDestination, len(dests))
	var wg sync.WaitGroup
	for i, d := range dests {
		wg.Go(func() {
			st, err := reg.Check(ctx, d.Name())
			c := checkedDestination{Name: d.Name(), Default: d == def, URL: d.Location().String(), ReadOnly: d.ReadOnly(),
				State: string(st.State), Reason: string(st.Reason), Message: st.Message}
			if err != nil && st.Message == "" {
				c.State, c.Message = string(destination.StateUnavailable), oneLine(err)
			}
			out[i] = c
		})
	}
	wg.Wait()

	unavailable := 0
	for _, c := range out {
		if c.State != string(destination.StateAvailable) {
			unavailable++
		}
	}
	if output == "json" {
		enc := json.NewEncoder(s.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(s.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tDEFAULT\tURL\tSTATE\tREASON\tMESSAGE")
		for _, c := range out {
			name := c.Name
			if c.ReadOnly {
				name += " (read-only)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", name, yesNo(c.Default), c.URL, c.State, dash(c.Reason), dash(c.Message))
		}
		tw.Flush()
	}
	if unavailable > 0 {
		return fmt.Errorf("%d of %d destinations unavailable", unavailable, len(out))
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
