package powerloss_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/redis/go-redis/v9"
)

// quietRedis drops go-redis's own log lines (a refused dial while a server
// restarts is expected here).
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quietRedis{})
	code := m.Run()
	if templateDir != "" {
		os.RemoveAll(filepath.Dir(templateDir))
	}
	os.Exit(code)
}
