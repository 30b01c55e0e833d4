// Command getload is the Go side of `capstan-bench security --auth-protocols go-h2`: closed-loop
// GETs through Go's net/http client over HTTP/2, the transport client-go (and so kubectl and
// every Go controller) uses. Unlike hyper's h2, Go's HPACK encoder adds the Authorization header
// to the connection's dynamic table, so a bearer token crosses the wire once per connection and
// then as a one-byte index: this measures a token's cost as Kubernetes' own clients meet it.
//
// Each of -clients goroutines has a Transport of its own (one TLS connection), sends one GET at
// a time and walks the paths of -paths with a stride of its own (as the Rust driver does). One
// warm-up GET per client opens the connections before the clock starts. Printed on stdout: the
// line "started" when the clock starts, then one JSON object with the counts, the measured wall
// time and CPU time of this process, and every successful request's latency in nanoseconds.
package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

type clientResult struct {
	ok         uint64
	errors     uint64
	firstError string
	latencies  []int64
}

type report struct {
	Ok          uint64  `json:"ok"`
	Errors      uint64  `json:"errors"`
	FirstError  string  `json:"first_error,omitempty"`
	ElapsedNs   int64   `json:"elapsed_ns"`
	CPUNs       int64   `json:"cpu_ns"`
	LatenciesNs []int64 `json:"latencies_ns"`
}

func main() {
	server := flag.String("server", "", "base URL of the API server")
	caFile := flag.String("ca", "", "CA certificates (PEM) the server's certificate chains to")
	certFile := flag.String("cert", "", "client certificate (PEM), optional")
	keyFile := flag.String("key", "", "client certificate's key (PEM)")
	tokenFile := flag.String("token-file", "", "file holding a bearer token, optional")
	pathsFile := flag.String("paths", "", "file of request paths, one a line")
	clients := flag.Int("clients", 32, "concurrent clients, one connection each")
	duration := flag.Duration("duration", 10*time.Second, "how long the load runs")
	flag.Parse()
	if err := run(*server, *caFile, *certFile, *keyFile, *tokenFile, *pathsFile, *clients, *duration); err != nil {
		fmt.Fprintln(os.Stderr, "getload:", err)
		os.Exit(1)
	}
}

func run(server, caFile, certFile, keyFile, tokenFile, pathsFile string, clients int, duration time.Duration) error {
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return errors.New("no certificate in " + caFile)
	}
	config := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return err
		}
		config.Certificates = []tls.Certificate{pair}
	}
	authorization := ""
	if tokenFile != "" {
		token, err := os.ReadFile(tokenFile)
		if err != nil {
			return err
		}
		authorization = "Bearer " + strings.TrimSpace(string(token))
	}
	paths, err := readLines(pathsFile)
	if err != nil {
		return err
	}
	if len(paths) == 0 {
		return errors.New("no paths in " + pathsFile)
	}

	httpClients := make([]*http.Client, clients)
	for c := range httpClients {
		httpClients[c] = &http.Client{Transport: &http.Transport{
			TLSClientConfig:     config.Clone(),
			ForceAttemptHTTP2:   true,
			MaxIdleConnsPerHost: 1,
		}}
	}
	get := func(c *http.Client, path string) error {
		request, err := http.NewRequest(http.MethodGet, server+path, nil)
		if err != nil {
			return err
		}
		request.Header.Set("Accept", "application/json")
		if authorization != "" {
			request.Header.Set("Authorization", authorization)
		}
		response, err := c.Do(request)
		if err != nil {
			return err
		}
		body, err := io.ReadAll(response.Body)
		response.Body.Close()
		if err != nil {
			return err
		}
		if response.ProtoMajor != 2 {
			return fmt.Errorf("the server answered over %s, not HTTP/2", response.Proto)
		}
		if response.StatusCode != http.StatusOK {
			if len(body) > 300 {
				body = body[:300]
			}
			return fmt.Errorf("GET %s: %s: %s", path, response.Status, body)
		}
		return nil
	}

	// Warm-up: every connection open (and every identity checked) before the clock starts.
	var warm sync.WaitGroup
	warmErrors := make([]error, clients)
	for c := range httpClients {
		warm.Add(1)
		go func(c int) {
			defer warm.Done()
			warmErrors[c] = get(httpClients[c], paths[0])
		}(c)
	}
	warm.Wait()
	for _, err := range warmErrors {
		if err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}

	writer := bufio.NewWriter(os.Stdout)
	fmt.Fprintln(writer, "started")
	if err := writer.Flush(); err != nil {
		return err
	}
	cpuBefore := cpuTime()
	start := time.Now()
	deadline := start.Add(duration)
	results := make([]clientResult, clients)
	var load sync.WaitGroup
	for c := range httpClients {
		load.Add(1)
		go func(c int) {
			defer load.Done()
			out := &results[c]
			stride := int64(7919 * (c + 1))
			for i := int64(0); time.Now().Before(deadline); i++ {
				index := (int64(c)*104729 + i*stride) % int64(len(paths))
				began := time.Now()
				if err := get(httpClients[c], paths[index]); err != nil {
					out.errors++
					if out.firstError == "" {
						out.firstError = err.Error()
					}
					if out.errors > 100 && out.ok == 0 {
						return
					}
					continue
				}
				out.latencies = append(out.latencies, time.Since(began).Nanoseconds())
				out.ok++
			}
		}(c)
	}
	load.Wait()
	elapsed := time.Since(start)
	cpu := cpuTime() - cpuBefore

	merged := report{ElapsedNs: elapsed.Nanoseconds(), CPUNs: cpu, LatenciesNs: []int64{}}
	for _, r := range results {
		merged.Ok += r.ok
		merged.Errors += r.errors
		if merged.FirstError == "" {
			merged.FirstError = r.firstError
		}
		merged.LatenciesNs = append(merged.LatenciesNs, r.latencies...)
	}
	if err := json.NewEncoder(writer).Encode(merged); err != nil {
		return err
	}
	return writer.Flush()
}

func readLines(file string) ([]string, error) {
	text, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var lines []string
	for _, line := range strings.Split(string(text), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			lines = append(lines, line)
		}
	}
	return lines, nil
}

// cpuTime is this process's user and system CPU time so far, in nanoseconds.
func cpuTime() int64 {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		return 0
	}
	return usage.Utime.Nano() + usage.Stime.Nano()
}
