// maxprocs SECONDS: how a Go program's parallelism follows its CPU set.
//
// Prints `env GOMAXPROCS=VALUE` (the variable as the program got it), then
// `t NS PROCS` every 50 ms for SECONDS, NS being CLOCK_MONOTONIC and PROCS
// runtime.GOMAXPROCS(0). Ends early once the file named by $STOP_FILE
// exists.
package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"time"
	"unsafe"
)

func monotonicNs() int64 {
	var ts syscall.Timespec
	const clockMonotonic = 1
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockMonotonic, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Nano()
}

func main() {
	secs, err := strconv.ParseFloat(os.Args[1], 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, "usage: maxprocs SECONDS")
		os.Exit(2)
	}
	fmt.Printf("env GOMAXPROCS=%s\n", os.Getenv("GOMAXPROCS"))
	end := time.Now().Add(time.Duration(secs * float64(time.Second)))
	stop := os.Getenv("STOP_FILE")
	for time.Now().Before(end) {
		if stop != "" {
			if _, err := os.Stat(stop); err == nil {
				break
			}
		}
		fmt.Printf("t %d %d\n", monotonicNs(), runtime.GOMAXPROCS(0))
		time.Sleep(50 * time.Millisecond)
	}
}
