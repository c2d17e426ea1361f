// The Node views of the differential oracle (tests/differential/README.md): llhttp, as Node's
// own HTTP server and client use it. Node's standard library only.
//
//   node nodeparse.js server     http.createServer: every request it parses is answered 200 with
//                                an X-Diff-View header (method, target, token values, body length
//                                and hash); a parse error is answered 400 with the llhttp code.
//   node nodeparse.js responses  llhttp's response parser (the HTTPParser Node's http client
//                                runs, strict, HEAD bodies skipped as the client does) over
//                                response streams read from stdin, one JSON job a line
//                                ({"id", "methods", "data" in hex}); one JSON line out per job.
//
// The server listens on 127.0.0.1 port 0 and prints "PORT <n>" first; both stop when stdin
// closes.
'use strict';

const crypto = require('crypto');
const http = require('http');
const readline = require('readline');
const { HTTPParser } = require('_http_common');

const END_TARGET = '/__diff_end__';

function hex(text) {
  return Buffer.from(text, 'latin1').toString('hex');
}

function view(method, target, tokens, n, sum) {
  const tok = tokens.map((t) => hex(t.replace(/^[ \t]+|[ \t]+$/g, ''))).join(',');
  return `${hex(method)} ${hex(target)} ${tokens.length}:${tok} ${n} ${sum.slice(0, 16)}`;
}

function server() {
  // A parse error of a pipelined request is answered only after the answers of the requests
  // before it (Node's default handler would write it at once, ahead of them).
  const finishedOne = (socket) => {
    socket.diffPending -= 1;
    if (socket.diffPending === 0 && socket.diffError) {
      const text = socket.diffError;
      socket.diffError = null;
      if (socket.writable && !socket.destroyed) socket.end(text);
      setImmediate(() => socket.destroy());
    }
  };
  const srv = http.createServer({ maxHeaderSize: 1 << 20, requestTimeout: 0, headersTimeout: 30000 },
    (req, res) => {
      const socket = req.socket;
      socket.diffPending = (socket.diffPending || 0) + 1;
      res.on('finish', () => finishedOne(socket));
      res.on('close', () => { if (!res.writableFinished) finishedOne(socket); });
      const h = crypto.createHash('sha1');
      let n = 0;
      req.on('data', (chunk) => { h.update(chunk); n += chunk.length; });
      req.on('error', () => {});
      req.on('end', () => {
        const tokens = [];
        for (let i = 0; i < req.rawHeaders.length; i += 2) {
          if (req.rawHeaders[i].toLowerCase() === 'x-fencing-token') tokens.push(req.rawHeaders[i + 1]);
        }
        const headers = { 'X-Diff-View': view(req.method, req.url, tokens, n, h.digest('hex')),
                          'Content-Length': '0' };
        if (req.url === END_TARGET) headers.Connection = 'close';
        res.writeHead(200, headers);
        res.end();
      });
    });
  srv.keepAliveTimeout = 30000;
  srv.on('clientError', (err, socket) => {
    const code = hex('llhttp: ' + (err.code || 'error') + ' ' + (err.reason || err.message || ''));
    const text = `HTTP/1.1 400 Bad Request\r\nX-Diff-Error: ${code}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`;
    if (socket.diffPending > 0) {
      socket.diffError = text;
      return;
    }
    if (socket.writable && !socket.destroyed) socket.end(text);
    setImmediate(() => socket.destroy());
  });
  srv.listen(0, '127.0.0.1', () => {
    process.stdout.write(`PORT ${srv.address().port}\n`);
  });
  process.stdin.on('end', () => process.exit(0));
  process.stdin.resume();
}

// The responses of a client that sent `methods` in order (past the last one: as if GET).
// Interim responses (1xx but 101) are skipped. It stops at an error, after a response that ends
// the connection (not keep-alive, or 101), or at the end of the bytes (then llhttp is told of
// the close, which ends a body delimited by it).
function readAll(job) {
  const data = Buffer.from(job.data, 'hex');
  const out = { id: job.id, resps: [], err: '', rest: 0 };
  const parser = new HTTPParser();
  parser.initialize(HTTPParser.RESPONSE, {}, 1 << 20, HTTPParser.kLenientNone || 0);
  let index = 0;
  let hash = null;
  let n = 0;
  let interim = false;
  let status = 0;
  let stop = false;
  let headerParts = [];
  parser[HTTPParser.kOnHeaders] = (headers) => { headerParts = headerParts.concat(headers); };
  parser[HTTPParser.kOnHeadersComplete] = (vMajor, vMinor, headers, method, url, statusCode,
    statusMessage, upgrade, keepAlive) => {
    headerParts = [];
    status = statusCode;
    interim = statusCode >= 100 && statusCode < 200 && statusCode !== 101;
    hash = crypto.createHash('sha1');
    n = 0;
    if (!interim && !keepAlive) stop = true;
    if (statusCode === 101) stop = true;
    const m = index < job.methods.length ? job.methods[index] : 'GET';
    if (!interim && m === 'HEAD') return 1;  // as Node's http client does: no body
    return 0;
  };
  parser[HTTPParser.kOnBody] = (chunk) => { hash.update(chunk); n += chunk.length; };
  parser[HTTPParser.kOnMessageComplete] = () => {
    if (interim) return;
    out.resps.push({ s: status, n, h: hash.digest('hex').slice(0, 16) });
    index += 1;
  };
  const r = parser.execute(data);
  if (r instanceof Error) {
    if (r.code === 'HPE_CLOSED_CONNECTION') {
      // llhttp reports it once it has taken the first byte after the message
      out.rest = data.length - r.bytesParsed + 1;
    } else {
      out.err = `${r.code} ${r.reason || ''}`.trim();
      out.rest = data.length - r.bytesParsed;
    }
  } else if (typeof r === 'number' && r < data.length) {
    out.rest = data.length - r;  // stopped at an upgrade: the rest is another protocol's
  } else {
    const f = parser.finish();
    if (f instanceof Error) out.err = out.err || `${f.code} ${f.reason || ''} (at the close)`.trim();
  }
  parser.close && parser.close();
  return out;
}

function responses() {
  const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  rl.on('line', (line) => {
    if (!line) return;
    let result;
    try {
      result = readAll(JSON.parse(line));
    } catch (e) {
      result = { id: -1, resps: [], err: 'driver: ' + e.message, rest: 0 };
    }
    process.stdout.write(JSON.stringify(result) + '\n');
  });
  rl.on('close', () => process.exit(0));
}

if (process.argv[2] === 'server') server();
else if (process.argv[2] === 'responses') responses();
else { process.stderr.write('usage: node nodeparse.js server|responses\n'); process.exit(2); }
