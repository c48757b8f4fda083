//! The AWS SDK for Rust (`aws-sdk-sqs`) against an SQS endpoint: send, then receive + delete,
//! at batch 1 and 10. It loads any SQS-compatible endpoint the same way (Sluice's
//! `sluice serve --sqs-listen`, moto's server, ElasticMQ, …) so that they can be compared in
//! one run on one machine, as `boto3_clients.py` beside it does for boto3:
//!
//! ```text
//! cargo run --release -- --endpoint http://127.0.0.1:9324 --label sluice
//! ```
//!
//! `--tasks` tasks share one client (its connection pool) and a share of `--messages`
//! messages of `--body-bytes` bytes. Phase one sends them all (SendMessage, or
//! SendMessageBatch of the batch size); phase two receives them (ReceiveMessage with that many
//! at most, long polling 1 s) and deletes each (DeleteMessage, or DeleteMessageBatch). A phase
//! ends when its last message is sent or deleted. One JSON line per batch size; a fresh queue
//! per run, deleted afterwards.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use aws_sdk_sqs::Client;
use aws_sdk_sqs::config::retry::RetryConfig;
use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_sqs::types::{
    DeleteMessageBatchRequestEntry, QueueAttributeName, SendMessageBatchRequestEntry,
};
use clap::Parser;

type Error = Box<dyn std::error::Error + Send + Sync>;

#[derive(Parser)]
#[command(about = "aws-sdk-sqs against an SQS endpoint: send, then receive + delete")]
struct Args {
    /// The endpoint's base URL.
    #[arg(long)]
    endpoint: String,
    /// A name for the endpoint in the output.
    #[arg(long, default_value = "endpoint")]
    label: String,
    /// Batch sizes to run, one run each.
    #[arg(long, default_value = "1,10", value_delimiter = ',')]
    batches: Vec<usize>,
    /// Concurrent tasks sending and receiving.
    #[arg(long, default_value_t = 4)]
    tasks: usize,
    /// Messages per run.
    #[arg(long, default_value_t = 4000)]
    messages: usize,
    /// Size of each body.
    #[arg(long, default_value_t = 256)]
    body_bytes: usize,
}

fn client(endpoint: &str) -> Client {
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("x", "x", None, None, "bench"))
        .retry_config(RetryConfig::disabled())
        .build();
    Client::from_conf(config)
}

async fn send(
    sqs: Client,
    url: Arc<str>,
    body: Arc<str>,
    count: usize,
    batch: usize,
) -> Result<(), Error> {
    let mut left = count;
    while left > 0 {
        let n = batch.min(left);
        if batch == 1 {
            sqs.send_message()
                .queue_url(&*url)
                .message_body(&*body)
                .send()
                .await?;
        } else {
            let entries = (0..n)
                .map(|i| {
                    SendMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .message_body(&*body)
                        .build()
                })
                .collect::<Result<Vec<_>, _>>()?;
            let out = sqs
                .send_message_batch()
                .queue_url(&*url)
                .set_entries(Some(entries))
                .send()
                .await?;
            if !out.failed().is_empty() {
                return Err(format!("send failures: {:?}", out.failed()).into());
            }
        }
        left -= n;
    }
    Ok(())
}

async fn consume(
    sqs: Client,
    url: Arc<str>,
    done: Arc<AtomicUsize>,
    total: usize,
    batch: usize,
) -> Result<Option<Instant>, Error> {
    let mut finished = None;
    while done.load(Ordering::Acquire) < total {
        let got = sqs
            .receive_message()
            .queue_url(&*url)
            .max_number_of_messages(batch as i32)
            .wait_time_seconds(1)
            .send()
            .await?;
        let messages = got.messages();
        if messages.is_empty() {
            continue;
        }
        if batch == 1 {
            let receipt = messages[0].receipt_handle().unwrap_or_default();
            sqs.delete_message()
                .queue_url(&*url)
                .receipt_handle(receipt)
                .send()
                .await?;
        } else {
            let entries = messages
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    DeleteMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .receipt_handle(m.receipt_handle().unwrap_or_default())
                        .build()
                })
                .collect::<Result<Vec<_>, _>>()?;
            let out = sqs
                .delete_message_batch()
                .queue_url(&*url)
                .set_entries(Some(entries))
                .send()
                .await?;
            if !out.failed().is_empty() {
                return Err(format!("delete failures: {:?}", out.failed()).into());
            }
        }
        if done.fetch_add(messages.len(), Ordering::AcqRel) + messages.len() >= total {
            finished = Some(Instant::now());
        }
    }
    Ok(finished)
}

async fn run(args: &Args, batch: usize) -> Result<serde_json::Value, Error> {
    let sqs = client(&args.endpoint);
    let name = format!(
        "bench-rs-{}",
        std::process::id() as u64 * 100 + batch as u64
    );
    let url: Arc<str> = sqs
        .create_queue()
        .queue_name(&name)
        .attributes(QueueAttributeName::VisibilityTimeout, "60")
        .send()
        .await?
        .queue_url()
        .ok_or("CreateQueue answered no QueueUrl")?
        .into();
    let body: Arc<str> = "x".repeat(args.body_bytes).into();
    let per_task = args.messages / args.tasks;
    let total = per_task * args.tasks;

    let start = Instant::now();
    let senders: Vec<_> = (0..args.tasks)
        .map(|_| {
            tokio::spawn(send(
                sqs.clone(),
                url.clone(),
                body.clone(),
                per_task,
                batch,
            ))
        })
        .collect();
    for s in senders {
        s.await??;
    }
    let send_secs = start.elapsed().as_secs_f64();

    let done = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let consumers: Vec<_> = (0..args.tasks)
        .map(|_| {
            tokio::spawn(consume(
                sqs.clone(),
                url.clone(),
                done.clone(),
                total,
                batch,
            ))
        })
        .collect();
    let mut finished = None;
    for c in consumers {
        finished = finished.or(c.await??);
    }
    let receive_secs = finished
        .map_or_else(|| start.elapsed(), |f| f - start)
        .as_secs_f64();
    sqs.delete_queue().queue_url(&*url).send().await?;
    Ok(serde_json::json!({
        "label": args.label,
        "client": "aws-sdk-sqs",
        "batch": batch,
        "tasks": args.tasks,
        "messages": total,
        "send_per_sec": (total as f64 / send_secs).round(),
        "receive_delete_per_sec": (total as f64 / receive_secs).round(),
    }))
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args = Args::parse();
    for &batch in &args.batches {
        if !(1..=10).contains(&batch) {
            return Err(format!("a batch is 1 to 10 messages, not {batch}").into());
        }
        let figures = tokio::time::timeout(Duration::from_secs(600), run(&args, batch)).await??;
        println!("{figures}");
    }
    Ok(())
}
