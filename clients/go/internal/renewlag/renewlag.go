// Package renewlag lets the renewals benchmark (clients/go/bench/renewalsbench) see each
// renewal's lag without a public API: the time from when a renewal fell due (the last
// success's sending + ttl/3) to its reply's arrival.
package renewlag

import (
	"sync/atomic"
	"time"
)

var observer atomic.Pointer[func(time.Duration)]

// Observe makes f see the lag of every renewal that succeeds from now on (nil: none).
func Observe(f func(lag time.Duration)) {
	if f == nil {
		observer.Store(nil)
		return
	}
	observer.Store(&f)
}

// Report hands lag to the observer, if there is one.
func Report(lag time.Duration) {
	if f := observer.Load(); f != nil {
		(*f)(lag)
	}
}
