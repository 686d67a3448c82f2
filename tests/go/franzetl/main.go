// franz-go's GroupTransactSession (consume-transform-produce, exactly once) against Keel: reads
// INPUT as a member of GROUP with read_committed, writes each record's value with "in-" replaced
// by "out-" to OUTPUT partition 0, and commits the group's offsets with the output in one
// transaction per poll (kgo.TryCommit: a round that cannot commit, e.g. across a rebalance or a
// broker failure, is aborted and redone). Stops once RECORDS input records were processed in
// committed transactions, printing "ETL-DONE committed=N rounds=R aborted=A".
//
// Usage: franzetl BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID RECORDS
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	if len(os.Args) != 7 {
		fmt.Fprintln(os.Stderr, "usage: franzetl BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID RECORDS")
		os.Exit(2)
	}
	bootstrap, input, output, group, txnID := os.Args[1], os.Args[2], os.Args[3], os.Args[4], os.Args[5]
	want, err := strconv.Atoi(os.Args[6])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	sess, err := kgo.NewGroupTransactSession(
		kgo.SeedBrokers(strings.Split(bootstrap, ",")...),
		kgo.TransactionalID(txnID),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(input),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
		kgo.DefaultProduceTopic(output),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.TransactionTimeout(20*time.Second),
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer sess.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 240*time.Second)
	defer cancel()
	committed, rounds, aborted := 0, 0, 0
	for committed < want {
		fetches := sess.PollFetches(ctx)
		if ctx.Err() != nil {
			fmt.Printf("ETL-TIMEOUT committed=%d rounds=%d aborted=%d\n", committed, rounds, aborted)
			os.Exit(1)
		}
		records := fetches.Records()
		if len(records) == 0 {
			continue
		}
		if err := sess.Begin(); err != nil {
			fmt.Fprintln(os.Stderr, "begin:", err)
			os.Exit(1)
		}
		for _, r := range records {
			out := &kgo.Record{Value: []byte(strings.Replace(string(r.Value), "in-", "out-", 1)), Partition: 0}
			sess.Produce(ctx, out, func(_ *kgo.Record, err error) {
				if err != nil {
					fmt.Fprintln(os.Stderr, "produce:", err)
				}
			})
		}
		rounds++
		ok, err := sess.End(ctx, kgo.TryCommit)
		if err != nil {
			fmt.Fprintln(os.Stderr, "end:", err)
		}
		if ok {
			committed += len(records)
		} else {
			aborted++
		}
	}
	fmt.Printf("ETL-DONE committed=%d rounds=%d aborted=%d\n", committed, rounds, aborted)
}
