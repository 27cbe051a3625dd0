// The Go net/http workload client of the benchmark harness (standard library only): the same
// workloads and JSON output as courier-bench. BENCH_CA_FILE names the CA to trust for https.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"
)

func emit(fields map[string]interface{}) {
	out, _ := json.Marshal(fields)
	fmt.Println(string(out))
}

func main() {
	if len(os.Args) < 4 {
		fmt.Fprintln(os.Stderr, "usage: go-bench w1|w2|w3|w4 URL COUNT|SINK [CONCURRENCY]")
		os.Exit(2)
	}
	workload, url := os.Args[1], os.Args[2]
	tlsConfig := &tls.Config{}
	if ca := os.Getenv("BENCH_CA_FILE"); ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			panic(err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		tlsConfig.RootCAs = pool
	}
	transport := &http.Transport{
		TLSClientConfig:     tlsConfig,
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 64,
		MaxConnsPerHost:     64,
	}
	client := &http.Client{Transport: transport}
	fetch := func(sink io.Writer) (int64, error) {
		response, err := client.Get(url)
		if err != nil {
			return 0, err
		}
		defer response.Body.Close()
		return io.Copy(sink, response.Body)
	}
	switch workload {
	case "w1", "w4":
		count, _ := strconv.Atoi(os.Args[3])
		fetch(io.Discard)
		errors, bytes := 0, int64(0)
		start := time.Now()
		for i := 0; i < count; i++ {
			n, err := fetch(io.Discard)
			if err != nil {
				errors++
			}
			bytes += n
		}
		emit(map[string]interface{}{"requests": count - errors, "seconds": time.Since(start).Seconds(), "bytes": bytes, "errors": errors})
	case "w2":
		count, _ := strconv.Atoi(os.Args[3])
		concurrency := 32
		if len(os.Args) > 4 {
			concurrency, _ = strconv.Atoi(os.Args[4])
		}
		fetch(io.Discard)
		var mutex sync.Mutex
		var waitGroup sync.WaitGroup
		next, errors, bytes := 0, 0, int64(0)
		start := time.Now()
		for worker := 0; worker < concurrency; worker++ {
			waitGroup.Add(1)
			go func() {
				defer waitGroup.Done()
				for {
					mutex.Lock()
					if next >= count {
						mutex.Unlock()
						return
					}
					next++
					mutex.Unlock()
					n, err := fetch(io.Discard)
					mutex.Lock()
					if err != nil {
						errors++
					}
					bytes += n
					mutex.Unlock()
				}
			}()
		}
		waitGroup.Wait()
		emit(map[string]interface{}{"requests": count - errors, "seconds": time.Since(start).Seconds(), "bytes": bytes, "errors": errors})
	case "w3":
		var sink io.Writer = io.Discard
		if os.Args[3] != "discard" {
			file, err := os.Create(os.Args[3])
			if err != nil {
				panic(err)
			}
			defer file.Close()
			sink = file
		}
		start := time.Now()
		n, err := fetch(sink)
		errors := 0
		if err != nil {
			errors = 1
		}
		emit(map[string]interface{}{"requests": 1 - errors, "seconds": time.Since(start).Seconds(), "bytes": n, "errors": errors})
	}
}
