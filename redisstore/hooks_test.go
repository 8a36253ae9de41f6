package redisstore

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// cmdHook is a go-redis hook showing each command a client sends, alone
// or in a pipeline, to before (before it is sent) and to after (once its
// reply, or error, is in); either may be nil.
type cmdHook struct{ before, after func(redis.Cmder) }

func (h cmdHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h cmdHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.see(h.before, cmd)
		err := next(ctx, cmd)
		h.see(h.after, cmd)
		return err
	}
}

func (h cmdHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.see(h.before, cmds...)
		err := next(ctx, cmds)
		h.see(h.after, cmds...)
		return err
	}
}

func (cmdHook) see(f func(redis.Cmder), cmds ...redis.Cmder) {
	if f == nil {
		return
	}
	for _, c := range cmds {
		f(c)
	}
}
