package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReport(t *testing.T) {
	tests := []struct {
		name  string
		input string
		code  int
		want  string
	}{
		{
			name: "pass",
			input: `{"Action":"run","Package":"p","Test":"T"}
{"Action":"output","Package":"p","Test":"T","Output":"noise\n"}
{"Action":"pass","Package":"p","Test":"T"}
{"Action":"pass","Package":"p","Elapsed":1.5}`,
			code: 0,
			want: "1 tests passed, 0 failed, 0 skipped",
		},
		{
			name: "skip fails the run",
			input: `{"Action":"output","Package":"p","Test":"T","Output":"needs minio\n"}
{"Action":"skip","Package":"p","Test":"T"}
{"Action":"pass","Package":"p"}`,
			code: 1,
			want: "SKIPPED (not allowed): p T",
		},
		{
			name: "failure shows output",
			input: `{"Action":"output","Package":"p","Test":"T","Output":"boom at x_test.go:3\n"}
{"Action":"fail","Package":"p","Test":"T"}
{"Action":"fail","Package":"p"}`,
			code: 1,
			want: "boom at x_test.go:3",
		},
		{
			name:  "build error",
			input: "# p\n./x.go:1: syntax error\n" + `{"Action":"fail","Package":"p"}`,
			code:  1,
			want:  "syntax error",
		},
		{
			name:  "package without tests",
			input: `{"Action":"skip","Package":"p"}`,
			code:  0,
			want:  "0 tests passed",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			code, err := report(strings.NewReader(tc.input), &out)
			require.NoError(t, err)
			require.Equal(t, tc.code, code, out.String())
			require.Contains(t, out.String(), tc.want)
		})
	}
}
