// The Go views of the differential oracle (tests/differential/README.md). Standard library only.
//
//	goparse server     Go's net/http server: every request it parses is answered 200 with an
//	                   X-Diff-View header (method, target, token values, body length and hash).
//	goparse relay      a raw recorder behind nginx and HAProxy: it reads what they forwarded
//	                   (well-formed HTTP/1.1 by then) and answers with the same X-Diff-View.
//	goparse responses  http.ReadResponse over response streams read from stdin, one JSON job a
//	                   line ({"id", "methods", "data" in hex}); one JSON line out per job.
//
// The servers listen on 127.0.0.1 port 0 and print "PORT <n>" as their first line. They stop
// when stdin closes (the harness keeps a pipe open), so a killed harness leaves none behind.
package main

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

const endTarget = "/__diff_end__"

func view(method, target string, tokens []string, n int64, sum []byte) string {
	hx := make([]string, len(tokens))
	for i, t := range tokens {
		hx[i] = hex.EncodeToString([]byte(strings.Trim(t, " \t")))
	}
	return fmt.Sprintf("%s %s %d:%s %d %s", hex.EncodeToString([]byte(method)),
		hex.EncodeToString([]byte(target)), len(tokens), strings.Join(hx, ","), n,
		hex.EncodeToString(sum)[:16])
}

func listen() net.Listener {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("PORT %d\n", l.Addr().(*net.TCPAddr).Port)
	os.Stdout.Sync()
	go func() { // the harness holds our stdin: its end is ours
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	return l
}

// ---- goparse server: net/http ------------------------------------------------------------

func serve() {
	l := listen()
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := sha1.New()
		n, err := io.Copy(h, r.Body)
		if err != nil {
			w.Header().Set("X-Diff-Error", hex.EncodeToString([]byte("body: "+err.Error())))
			w.Header().Set("Connection", "close")
			w.Header().Set("Content-Length", "0")
			w.WriteHeader(400)
			return
		}
		w.Header().Set("X-Diff-View", view(r.Method, r.RequestURI, r.Header.Values("X-Fencing-Token"), n, h.Sum(nil)))
		w.Header().Set("Content-Length", "0")
		if r.RequestURI == endTarget {
			w.Header().Set("Connection", "close")
		}
		w.WriteHeader(200)
	})
	srv := &http.Server{Handler: handler, MaxHeaderBytes: 1 << 20,
		ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 30 * time.Second,
		ErrorLog: log.New(io.Discard, "", 0)}
	log.Fatal(srv.Serve(l))
}

// ---- goparse relay: the recorder behind nginx and HAProxy --------------------------------

func readLine(br *bufio.Reader) (string, error) {
	line, err := br.ReadString('\n')
	if err != nil {
		return "", err
	}
	return strings.TrimRight(line, "\r\n"), nil
}

func relayConn(c net.Conn) {
	defer c.Close()
	br := bufio.NewReaderSize(c, 65536)
	bw := bufio.NewWriter(c)
	for {
		c.SetReadDeadline(time.Now().Add(60 * time.Second))
		line, err := readLine(br)
		if err != nil {
			return
		}
		if line == "" {
			continue
		}
		parts := strings.SplitN(line, " ", 3)
		if len(parts) != 3 {
			return
		}
		var tokens, te []string
		cl := int64(-1)
		bad := ""
		for {
			f, err := readLine(br)
			if err != nil {
				return
			}
			if f == "" {
				break
			}
			name, value, _ := strings.Cut(f, ":")
			value = strings.Trim(value, " \t")
			switch strings.ToLower(name) {
			case "x-fencing-token":
				tokens = append(tokens, value)
			case "transfer-encoding":
				te = append(te, value)
			case "content-length":
				v, err := strconv.ParseInt(value, 10, 64)
				if err != nil || (cl >= 0 && cl != v) {
					bad = "content-length " + value
				}
				cl = v
			}
		}
		h := sha1.New()
		var n int64
		if len(te) > 0 {
			if !strings.EqualFold(te[len(te)-1], "chunked") {
				bad = "transfer-encoding " + strings.Join(te, ",")
			}
			for bad == "" {
				sizeLine, err := readLine(br)
				if err != nil {
					return
				}
				sizeText, _, _ := strings.Cut(sizeLine, ";")
				size, err := strconv.ParseInt(strings.Trim(sizeText, " \t"), 16, 64)
				if err != nil || size < 0 {
					bad = "chunk size " + sizeLine
					break
				}
				if size == 0 {
					for { // trailers
						t, err := readLine(br)
						if err != nil {
							return
						}
						if t == "" {
							break
						}
					}
					break
				}
				if _, err := io.CopyN(h, br, size); err != nil {
					return
				}
				n += size
				if _, err := readLine(br); err != nil {
					return
				}
			}
		} else if cl > 0 && bad == "" {
			if _, err := io.CopyN(h, br, cl); err != nil {
				return
			}
			n = cl
		}
		if bad != "" { // what nginx or HAProxy forwarded is itself ambiguous: say so, and close
			fmt.Fprintf(bw, "HTTP/1.1 502 Bad Gateway\r\nX-Diff-Error: %s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
				hex.EncodeToString([]byte("relay: "+bad)))
			bw.Flush()
			return
		}
		fmt.Fprintf(bw, "HTTP/1.1 200 OK\r\nX-Diff-View: %s\r\nContent-Length: 0\r\n\r\n",
			view(parts[0], parts[1], tokens, n, h.Sum(nil)))
		if br.Buffered() == 0 {
			if err := bw.Flush(); err != nil {
				return
			}
		}
	}
}

func relay() {
	l := listen()
	for {
		c, err := l.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go relayConn(c)
	}
}

// ---- goparse responses: http.ReadResponse -------------------------------------------------

type job struct {
	ID      int64    `json:"id"`
	Methods []string `json:"methods"`
	Data    string   `json:"data"`
}

type resp struct {
	Status int    `json:"s"`
	N      int64  `json:"n"`
	Hash   string `json:"h"`
}

type result struct {
	ID    int64  `json:"id"`
	Resps []resp `json:"resps"`
	Err   string `json:"err"`
	Rest  int    `json:"rest"`
}

// readAll reads the responses of a client that sent methods, in order, skipping interim (1xx
// but 101) responses as RFC 9110 says; past the last method it reads on as if for GET. It stops
// at an error, after a response that ends the connection (Connection: close, a body delimited by
// the close, 101), or when the bytes run out.
func readAll(j job) result {
	out := result{ID: j.ID, Resps: []resp{}}
	data, err := hex.DecodeString(j.Data)
	if err != nil {
		out.Err = "bad job"
		return out
	}
	src := bytes.NewReader(data)
	br := bufio.NewReader(src)
	for i := 0; ; i++ {
		if _, err := br.Peek(1); err != nil {
			break
		}
		method := "GET"
		if i < len(j.Methods) {
			method = j.Methods[i]
		}
		var r *http.Response
		for {
			r, err = http.ReadResponse(br, &http.Request{Method: method})
			if err != nil {
				break
			}
			if r.StatusCode >= 100 && r.StatusCode < 200 && r.StatusCode != 101 {
				if _, perr := br.Peek(1); perr != nil {
					r = nil // interim, then the close: no final response
					break
				}
				continue
			}
			break
		}
		if err == nil && r == nil {
			break
		}
		if err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				out.Err = "incomplete head"
			} else {
				out.Err = "head: " + err.Error()
			}
			break
		}
		h := sha1.New()
		n, err := io.Copy(h, r.Body)
		r.Body.Close()
		if err != nil {
			out.Err = "body: " + err.Error()
			break
		}
		out.Resps = append(out.Resps, resp{Status: r.StatusCode, N: n, Hash: hex.EncodeToString(h.Sum(nil))[:16]})
		if r.Close || r.StatusCode == 101 {
			break
		}
	}
	out.Rest = br.Buffered() + src.Len()
	return out
}

func responses() {
	in := bufio.NewReaderSize(os.Stdin, 1<<20)
	enc := json.NewEncoder(os.Stdout)
	for {
		line, err := in.ReadBytes('\n')
		if len(line) > 0 {
			var j job
			if json.Unmarshal(line, &j) != nil {
				log.Fatalf("bad job line %q", line)
			}
			enc.Encode(readAll(j))
		}
		if err != nil {
			return
		}
	}
}

func main() {
	if len(os.Args) != 2 {
		log.Fatal("usage: goparse server|relay|responses")
	}
	switch os.Args[1] {
	case "server":
		serve()
	case "relay":
		relay()
	case "responses":
		responses()
	default:
		log.Fatal("usage: goparse server|relay|responses")
	}
}
