package zapslog

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.uber.org/zap"
)

func TestZapBridge(t *testing.T) {
	var buf bytes.Buffer
	lg := New(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	lg.Info("routine") // below warn: dropped
	lg.With(zap.String("endpoint", "a:1")).Warn("retrying", zap.Int("attempt", 2))
	out := buf.String()
	assert.NotContains(t, out, "routine")
	assert.Contains(t, out, "level=WARN")
	assert.Contains(t, out, "msg=retrying")
	assert.Contains(t, out, "endpoint=a:1")
	assert.Contains(t, out, "attempt=2")
	assert.Equal(t, 1, strings.Count(out, "\n"))

	New(nil).Error("silent") // must not panic
}
