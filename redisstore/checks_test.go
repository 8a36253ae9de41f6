package redisstore

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// serverFunc answers the server checks with the given replies (a nil
// entry: the default of answerChecks) and every other command with a
// first claim.
func serverFunc(replies map[string]*redis.Cmd) clientFunc {
	return func(ctx context.Context, args ...any) *redis.Cmd {
		name, _ := args[0].(string)
		if c, ok := replies[name]; ok {
			return c
		}
		return answerChecks(func(ctx context.Context, args ...any) *redis.Cmd {
			cmd := redis.NewCmd(ctx, args...)
			cmd.SetVal([]any{int64(1), int64(0)})
			return cmd
		})(ctx, args...)
	}
}

func reply(v any, err error) *redis.Cmd {
	cmd := redis.NewCmd(context.Background())
	cmd.SetVal(v)
	cmd.SetErr(err)
	return cmd
}

func TestServerChecksRefuseWhatDoesNotFit(t *testing.T) {
	noperm := errors.New("NOPERM this user has no permissions to run the 'role' command")
	now := time.Now()
	tests := []struct {
		name    string
		replies map[string]*redis.Cmd
		opts    Options
		want    error // nil: Open succeeds
	}{
		{"lone primary", nil, Options{}, nil},
		{"replica", map[string]*redis.Cmd{"ROLE": reply([]any{"slave", "127.0.0.1", int64(6379), "connected", int64(1)}, nil)}, Options{}, ErrConfig},
		{"sentinel", map[string]*redis.Cmd{"ROLE": reply([]any{"sentinel", []any{}}, nil)}, Options{}, ErrConfig},
		{"primary with replicas", map[string]*redis.Cmd{"ROLE": reply([]any{"master", int64(10), []any{[]any{"127.0.0.1", "6380", "10"}}}, nil)}, Options{}, ErrConfig},
		{"primary with replicas, async allowed", map[string]*redis.Cmd{"ROLE": reply([]any{"master", int64(10), []any{[]any{"127.0.0.1", "6380", "10"}}}, nil)}, Options{AllowAsyncReplicas: true}, nil},
		{"ROLE forbidden", map[string]*redis.Cmd{"ROLE": reply(nil, noperm)}, Options{}, ErrConfig},
		{"ROLE forbidden, async allowed", map[string]*redis.Cmd{"ROLE": reply(nil, noperm)}, Options{AllowAsyncReplicas: true}, nil},
		{"ROLE odd", map[string]*redis.Cmd{"ROLE": reply("master", nil)}, Options{}, ErrUnavailable},
		{"ROLE short", map[string]*redis.Cmd{"ROLE": reply([]any{"master"}, nil)}, Options{}, ErrUnavailable},
		{"ROLE fails", map[string]*redis.Cmd{"ROLE": reply(nil, errors.New("i/o timeout"))}, Options{}, ErrUnavailable},
		{"CONFIG forbidden", map[string]*redis.Cmd{"CONFIG": reply(nil, errors.New("ERR unknown command 'CONFIG'"))}, Options{}, nil},
		{"CONFIG odd", map[string]*redis.Cmd{"CONFIG": reply(int64(1), nil)}, Options{}, nil},
		{"RESP3 map, evicting", map[string]*redis.Cmd{"CONFIG": reply(map[any]any{"maxmemory-policy": "allkeys-lru"}, nil)}, Options{}, ErrConfig},
		{"RESP3 map, noeviction", map[string]*redis.Cmd{"CONFIG": reply(map[any]any{"maxmemory-policy": "noeviction"}, nil)}, Options{}, nil},
		{"CONFIG fails", map[string]*redis.Cmd{"CONFIG": reply(nil, errors.New("i/o timeout"))}, Options{}, ErrUnavailable},
		{"TIME odd", map[string]*redis.Cmd{"TIME": reply([]any{"x", "y"}, nil)}, Options{}, ErrUnavailable},
		{"TIME short", map[string]*redis.Cmd{"TIME": reply([]any{"1"}, nil)}, Options{}, ErrUnavailable},
		{"TIME fails", map[string]*redis.Cmd{"TIME": reply(nil, errors.New("i/o timeout"))}, Options{}, ErrUnavailable},
		{"Redis two minutes ahead", map[string]*redis.Cmd{"TIME": reply([]any{strconv.FormatInt(now.Add(2*time.Minute).Unix(), 10), "0"}, nil)}, Options{}, ErrClockSkew},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Open(context.Background(), serverFunc(tt.replies), tt.opts)
			switch {
			case tt.want == nil && err != nil:
				t.Fatalf("Open: %v", err)
			case tt.want != nil && !errors.Is(err, tt.want):
				t.Fatalf("Open = %v; want %v", err, tt.want)
			case errors.Is(tt.want, ErrConfig) && Reason(err) == "":
				t.Fatalf("ErrConfig without a reason: %v", err)
			}
		})
	}
}

func TestAckedRefusesTooFewAcknowledgements(t *testing.T) {
	d := durability{Durability: Durability{Replicas: 2, LocalAOF: true, ReplicaAOF: 1}}
	tests := []struct {
		name          string
		wait, waitAOF *redis.Cmd
		want          error
	}{
		{"enough", reply(int64(2), nil), reply([]any{int64(1), int64(1)}, nil), nil},
		{"too few replicas", reply(int64(1), nil), reply([]any{int64(1), int64(1)}, nil), ErrNotDurable},
		{"no local fsync", reply(int64(2), nil), reply([]any{int64(0), int64(1)}, nil), ErrNotDurable},
		{"too few replica fsyncs", reply(int64(2), nil), reply([]any{int64(1), int64(0)}, nil), ErrNotDurable},
		{"WAIT error", reply(nil, errors.New("ERR")), nil, ErrUnavailable},
		{"WAIT odd", reply("OK", nil), nil, ErrUnavailable},
		{"WAITAOF error", reply(int64(2), nil), reply(nil, errors.New("ERR")), ErrUnavailable},
		{"WAITAOF short", reply(int64(2), nil), reply([]any{int64(1)}, nil), ErrUnavailable},
		{"WAITAOF odd", reply(int64(2), nil), reply([]any{"1", "1"}, nil), ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := d.acked(tt.wait, tt.waitAOF)
			if (tt.want == nil) != (err == nil) || (tt.want != nil && !errors.Is(err, tt.want)) {
				t.Fatalf("acked = %v; want %v", err, tt.want)
			}
		})
	}
}
