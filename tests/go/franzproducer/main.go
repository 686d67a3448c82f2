// franz-go's producer with its default settings (idempotent, acks=all, retries until the
// record timeout) writing numbered records to a topic at a steady rate, so a test can kill a
// partition leader while it runs. Record n goes to partition n % partitions with value "n" (the
// manual partitioner is the one option set: it decides where records go, not how they are
// delivered). Prints "acked N" every 250 acknowledgements and, at the end,
// "DONE sent=N acked=A failed=F" (with the first error on stderr).
//
// Usage: franzproducer BOOTSTRAP TOPIC RECORDS PARTITIONS RATE_PER_SECOND
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	if len(os.Args) != 6 {
		fmt.Fprintln(os.Stderr, "usage: franzproducer BOOTSTRAP TOPIC RECORDS PARTITIONS RATE_PER_SECOND")
		os.Exit(2)
	}
	bootstrap, topic := os.Args[1], os.Args[2]
	records, err1 := strconv.Atoi(os.Args[3])
	partitions, err2 := strconv.Atoi(os.Args[4])
	rate, err3 := strconv.Atoi(os.Args[5])
	if err1 != nil || err2 != nil || err3 != nil || partitions < 1 || rate < 1 {
		fmt.Fprintln(os.Stderr, "RECORDS, PARTITIONS and RATE_PER_SECOND must be positive numbers")
		os.Exit(2)
	}
	client, err := kgo.NewClient(
		kgo.SeedBrokers(strings.Split(bootstrap, ",")...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		os.Exit(1)
	}
	defer client.Close()

	var acked, failed atomic.Int64
	var firstFailure sync.Once
	started := time.Now()
	ctx := context.Background()
	for n := 0; n < records; n++ {
		due := started.Add(time.Duration(n) * time.Second / time.Duration(rate))
		if wait := time.Until(due); wait > 0 {
			time.Sleep(wait)
		}
		record := &kgo.Record{Topic: topic, Partition: int32(n % partitions), Value: []byte(strconv.Itoa(n))}
		client.Produce(ctx, record, func(_ *kgo.Record, err error) {
			if err != nil {
				failed.Add(1)
				firstFailure.Do(func() { fmt.Fprintln(os.Stderr, "first failure:", err) })
				return
			}
			if a := acked.Add(1); a%250 == 0 {
				fmt.Printf("acked %d\n", a)
			}
		})
	}
	if err := client.Flush(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "flush:", err)
	}
	fmt.Printf("DONE sent=%d acked=%d failed=%d\n", records, acked.Load(), failed.Load())
}
