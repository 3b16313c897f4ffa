package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestREADMECommandsAndFlags holds the README to the binary: every command
// the CLI has is named in "The CLI", every flag that section names is a
// flag of some command, and every `etcdbackup COMMAND ...` line anywhere in
// the README (continued with a backslash) uses flags that command has.
func TestREADMECommandsAndFlags(t *testing.T) {
	raw, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	readme := string(raw)
	tr := &transcript{t: t}
	flagsOf := map[string]map[string]bool{}
	any := map[string]bool{"help": true, "version": true}
	flagLine := regexp.MustCompile(`(?m)^  -([a-z][a-z-]*)`)
	for _, c := range commands {
		r := tr.ok(c.name, "--help")
		flagsOf[c.name] = map[string]bool{"help": true}
		for _, m := range flagLine.FindAllStringSubmatch(r.stdout, -1) {
			flagsOf[c.name][m[1]] = true
			any[m[1]] = true
		}
	}

	start := strings.Index(readme, "## The CLI")
	require.GreaterOrEqual(t, start, 0)
	end := start + 1 + strings.Index(readme[start+1:], "\n## ")
	section := readme[start:end]
	for _, c := range commands {
		require.Contains(t, section, "`"+c.name+"`", "README's The CLI names the command %s", c.name)
	}
	flag := regexp.MustCompile(`--([a-z][a-z-]*)`)
	for _, m := range flag.FindAllStringSubmatch(section, -1) {
		require.True(t, any[m[1]], "README's The CLI names --%s, which no command has", m[1])
	}

	invocation := regexp.MustCompile(`etcdbackup ([a-z]+)((?: [^\n` + "`" + `'|]*(?:\\\n)?)*)`)
	for _, m := range invocation.FindAllStringSubmatch(readme, -1) {
		flags, ok := flagsOf[m[1]]
		if !ok {
			continue // prose: "etcdbackup is", "etcdbackup help COMMAND"
		}
		for _, f := range flag.FindAllStringSubmatch(m[2], -1) {
			require.True(t, flags[f[1]], "README runs etcdbackup %s with --%s, which it does not have:\n%s", m[1], f[1], m[0])
		}
	}
}
