// franz-go's producer with its default settings (idempotent, acks=all, retries until the
// record timeout) writing numbered records to a topic at a steady rate, so a test can kill a
// partition leader while it runs. Record n goes to partition n % partitions with value "n" (the
// manual partitioner is the one option set: it decides where records go, not how they are
// delivered). Prints "acked N" every 250 acknowledgements and, at the end,
// "DONE sent=N acked=A failed=F" (with the first error on stderr).
//
// Usage: franzproducer BOOTSTRAP TOPIC RECORDS PARTITIONS RATE_PER_SECOND
//
// Over TLS and SASL when the environment says so: KEEL_TLS_CA_FILE (a PEM CA the brokers'
// certificates chain to: TLS on), KEEL_SASL_MECHANISM (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)
// with KEEL_SASL_USERNAME and KEEL_SASL_PASSWORD.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// security is the TLS and SASL options the environment asks for.
func security() ([]kgo.Opt, error) {
	var opts []kgo.Opt
	if caFile := os.Getenv("KEEL_TLS_CA_FILE"); caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("no certificate in %s", caFile)
		}
		opts = append(opts, kgo.DialTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}))
	}
	user, pass := os.Getenv("KEEL_SASL_USERNAME"), os.Getenv("KEEL_SASL_PASSWORD")
	var mechanism sasl.Mechanism
	switch m := os.Getenv("KEEL_SASL_MECHANISM"); m {
	case "":
		return opts, nil
	case "PLAIN":
		mechanism = plain.Auth{User: user, Pass: pass}.AsMechanism()
	case "SCRAM-SHA-256":
		mechanism = scram.Auth{User: user, Pass: pass}.AsSha256Mechanism()
	case "SCRAM-SHA-512":
		mechanism = scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()
	default:
		return nil, fmt.Errorf("unknown KEEL_SASL_MECHANISM %q", m)
	}
	return append(opts, kgo.SASL(mechanism)), nil
}

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
	opts, err := security()
	if err != nil {
		fmt.Fprintln(os.Stderr, "security settings:", err)
		os.Exit(2)
	}
	client, err := kgo.NewClient(append(opts,
		kgo.SeedBrokers(strings.Split(bootstrap, ",")...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	)...)
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
