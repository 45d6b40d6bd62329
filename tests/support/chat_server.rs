//! A scriptable local HTTP server speaking the OpenAI chat-completions API, for tests of
//! the teacher client: valid JSON, malformed JSON, 429 with Retry-After, 500, a hang.
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the server does with one request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// 200 with this assistant content.
    Content(String),
    /// 429 with `Retry-After: <seconds>`.
    TooMany(f64),
    /// 500.
    ServerError,
    /// Sleep this long, then close without answering.
    Hang(Duration),
    /// Sleep, then do the inner reply.
    Delayed(Duration, Box<Reply>),
    /// A client error (`400`, `422`…) with this message.
    Reject(u16, String),
}

/// One request as received.
#[derive(Debug, Clone)]
pub struct Received {
    /// When it arrived.
    pub at: Instant,
    /// The `Authorization` header.
    pub authorization: Option<String>,
    /// The JSON body.
    pub body: serde_json::Value,
}

impl Received {
    /// Content of the message at `i`.
    pub fn message(&self, i: usize) -> String {
        self.body["messages"][i]["content"].as_str().unwrap_or_default().to_string()
    }
    /// The first passage of the user prompt (between the first pair of `"""`).
    pub fn passage(&self) -> String {
        let user = self.message(1);
        user.split("\"\"\"").nth(1).unwrap_or_default().trim().to_string()
    }
}

/// The script: request number (0-based, arrival order) and the request → reply.
pub type Script = dyn Fn(usize, &Received) -> Reply + Send + Sync;

/// A running server (stops when the test process ends). Only `POST …/chat/completions` is
/// scripted and recorded; `GET …/models` answers with the model metadata given (if any),
/// every other path with 404.
pub struct ChatServer {
    /// Base URL up to `/v1`.
    pub url: String,
    /// Every request so far.
    pub received: Arc<Mutex<Vec<Received>>>,
}

/// A reply the teacher contract accepts, with a question built from the passage so that
/// questions differ per chunk.
pub fn valid_reply(r: &Received) -> String {
    let words: Vec<String> = r.passage().split_whitespace().take(12).map(|w| w.trim_matches(|c: char| !c.is_alphanumeric()).to_string()).collect();
    serde_json::json!({
        "question": format!("What does the manual require regarding {}?", words.join(" ")),
        "reasoning": {"contextual_audit": "the passage scope.", "evidence_mapping": "the sentence quoted.", "synthesis": "combined.", "verification": "checked against the passage."},
        "answer": format!("It says: {}.", words.join(" ")),
    })
    .to_string()
}

fn respond(stream: &mut TcpStream, status: &str, extra: &str, body: &str) {
    let _ = write!(stream, "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n{extra}\r\n{body}", body.len());
    let _ = stream.flush();
}

fn handle(mut stream: TcpStream, script: Arc<Script>, received: Arc<Mutex<Vec<Received>>>, models: Option<serde_json::Value>) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone stream"));
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let path = line.split_whitespace().nth(1).unwrap_or_default().to_string();
    let mut length = 0usize;
    let mut authorization = None;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            match k.trim().to_ascii_lowercase().as_str() {
                "content-length" => length = v.trim().parse().unwrap_or(0),
                "authorization" => authorization = Some(v.trim().to_string()),
                _ => {}
            }
        }
    }
    let mut body = vec![0u8; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    if !path.ends_with("/chat/completions") {
        return match (&models, path.ends_with("/models")) {
            (Some(m), true) => respond(&mut stream, "200 OK", "", &m.to_string()),
            _ => respond(&mut stream, "404 Not Found", "", r#"{"error":{"message":"not found"}}"#),
        };
    }
    let req = Received { at: Instant::now(), authorization, body: serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null) };
    let n = {
        let mut r = received.lock().unwrap();
        r.push(req.clone());
        r.len() - 1
    };
    let mut reply = script(n, &req);
    loop {
        match reply {
            Reply::Delayed(d, inner) => {
                std::thread::sleep(d);
                reply = *inner;
            }
            Reply::Hang(d) => {
                std::thread::sleep(d);
                return;
            }
            Reply::TooMany(s) => return respond(&mut stream, "429 Too Many Requests", &format!("Retry-After: {s}\r\n"), r#"{"error":{"message":"rate limited"}}"#),
            Reply::Reject(status, message) => return respond(&mut stream, &format!("{status} Bad Request"), "", &serde_json::json!({"error": {"message": message}}).to_string()),
            Reply::ServerError => return respond(&mut stream, "500 Internal Server Error", "", r#"{"error":{"message":"boom"}}"#),
            Reply::Content(c) => {
                let body = serde_json::json!({
                    "id": format!("chatcmpl-{n}"), "object": "chat.completion", "created": 0, "model": req.body["model"],
                    "choices": [{ "index": 0, "message": { "role": "assistant", "content": c }, "finish_reason": "stop" }],
                    "usage": { "prompt_tokens": 100, "completion_tokens": 50, "total_tokens": 150 },
                });
                return respond(&mut stream, "200 OK", "", &body.to_string());
            }
        }
    }
}

impl ChatServer {
    /// Starts a server on a free local port.
    pub fn start(script: impl Fn(usize, &Received) -> Reply + Send + Sync + 'static) -> ChatServer {
        Self::start_with_models(None, script)
    }

    /// A server whose `GET /v1/models` lists `test-model` with a context of `context` tokens
    /// (as vLLM reports it: `max_model_len`).
    pub fn start_with_context(context: usize, script: impl Fn(usize, &Received) -> Reply + Send + Sync + 'static) -> ChatServer {
        Self::start_with_models(Some(serde_json::json!({"object": "list", "data": [{"id": "test-model", "object": "model", "max_model_len": context}]})), script)
    }

    fn start_with_models(models: Option<serde_json::Value>, script: impl Fn(usize, &Received) -> Reply + Send + Sync + 'static) -> ChatServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a local port");
        let addr = listener.local_addr().unwrap();
        // Loopback only: a scripted endpoint must not be reachable from another interface.
        assert!(addr.ip().is_loopback(), "the scripted chat server listens on {addr}, outside loopback");
        let url = format!("http://{addr}/v1");
        let received = Arc::new(Mutex::new(Vec::new()));
        let script: Arc<Script> = Arc::new(script);
        let rec = received.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (script, rec, models) = (script.clone(), rec.clone(), models.clone());
                std::thread::spawn(move || handle(stream, script, rec, models));
            }
        });
        ChatServer { url, received }
    }

    /// A snapshot of the requests so far.
    pub fn requests(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}
