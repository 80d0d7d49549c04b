package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ovstream/ovstream/consumer"
)

// runMaxDelay returns the --max-delay that args (the --run-args of `ovstream
// run`) give, as `--max-delay D`, `--max-delay=D` or with one dash, or
// run's default, consumer.DefaultMaxDelay: the peers must drop the
// predictions run sets aside as implausible, or their rows differ from
// (b)'s.
func runMaxDelay(args []string) (time.Duration, error) {
	d := consumer.DefaultMaxDelay
	for i := 0; i < len(args); i++ {
		name, value, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if name != "max-delay" || !strings.HasPrefix(args[i], "-") {
			continue
		}
		if !hasValue {
			if i+1 == len(args) {
				return 0, errors.New("--max-delay needs a value")
			}
			i++
			value = args[i]
		}
		v, err := time.ParseDuration(value)
		if err != nil {
			return 0, fmt.Errorf("--max-delay: %w", err)
		}
		d = v
	}
	return d, nil
}
