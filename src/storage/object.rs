//! Object stores (`s3://`, `gs://`, `az://`, `memory://`) through the `object_store` crate,
//! behind a blocking API: one small tokio runtime (two worker threads, started on first use)
//! runs every request, and callers (rayon's threads, the CLI's) block on it.
//!
//! Stores are built once per scheme and bucket and kept for the process (so `memory://` is one
//! store per bucket for the life of the process), from the environment as `object_store`'s
//! `from_env` builders read it (`AWS_*`, `GOOGLE_*`, `AZURE_*`; `AWS_ENDPOINT_URL` and
//! `AWS_ALLOW_HTTP` point S3 at a local server). Requests are retried at most twice within
//! ten seconds, and a connection must open within five: a wrong endpoint, a missing bucket or
//! bad credentials fail within seconds, without a storm of retries.
//!
//! Conditional puts ([`Put::Create`], [`Put::Update`]) are what the commit protocol and the
//! save lease rely on (`ARCHITECTURE.md`, "Object stores"); S3 is told to use `If-None-Match`
//! and `If-Match` for them.

use std::collections::HashMap;
use std::io::{self, Read};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::TryStreamExt;
use object_store::path::Path as Key;
use object_store::{
    ClientOptions, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, RetryConfig,
    UpdateVersion, WriteMultipart,
};

use super::StorageError;
pub use super::{Meta, Put};

/// Objects larger than this are uploaded in parts of this size.
pub const PART_SIZE: usize = 16 << 20;
/// Parts of one upload in flight at once.
const PARTS_IN_FLIGHT: usize = 4;

/// Reads smaller than this that the open GET cannot serve are served from blocks of this
/// size, fetched whole.
const BLOCK: u64 = 2 << 20;
/// How far ahead of the open GET's position a read may start and still continue it (the bytes
/// between are read and dropped).
const SKIP: u64 = 1 << 20;
/// Blocks an [`ObjectBlob`] keeps (its memory bound: `BLOCK * CACHED`).
const CACHED: usize = 8;

/// An object opened for reads. Reads in file order (a restore reads tensors as the bundle
/// stores them) continue one open GET: the first read opens a GET from its offset to the end of
/// the object and each later read at (or just past) where the previous one stopped takes the
/// next bytes of its body, straight into the caller's buffer, so a whole restore costs about
/// one GET per data file, whatever the number of tensors. A large read elsewhere opens a new
/// GET there (the old one's connection is dropped, its rest never read); a small one is served
/// from a few cached blocks of `BLOCK` bytes, each one bounded GET.
#[derive(Debug)]
pub struct ObjectBlob {
    store: Arc<dyn ObjectStore>,
    key: Key,
    url: String,
    len: u64,
    blocks: Mutex<std::collections::VecDeque<(u64, bytes::Bytes)>>,
    open: Mutex<Option<OpenGet>>,
}

/// A GET in progress, from `at` to the end of the object.
struct OpenGet {
    /// The offset of the first byte of `rest`.
    at: u64,
    /// What is left of the body's last chunk.
    rest: bytes::Bytes,
    body: futures::stream::BoxStream<'static, object_store::Result<bytes::Bytes>>,
}

impl std::fmt::Debug for OpenGet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenGet")
            .field("at", &self.at)
            .finish_non_exhaustive()
    }
}

impl ObjectBlob {
    /// Opens the object at URL `path` (one HEAD request for its length).
    pub fn open(path: &Path) -> io::Result<ObjectBlob> {
        let (store, key, url) = resolve(path)?;
        let meta = block(store.head(&key)).map_err(|err| convert(&url, "open", err))?;
        Ok(ObjectBlob {
            store,
            key,
            url,
            len: meta.size,
            blocks: Mutex::default(),
            open: Mutex::default(),
        })
    }

    /// Starts opening the object at URL `path` with a GET of all of it, to be read from its
    /// start on ([`super::Blob::open_ahead`]): the request is sent on the storage runtime and
    /// not awaited here; [`PendingObject::wait`] takes its answer.
    pub fn open_ahead(path: &Path, read_ahead: usize) -> io::Result<PendingObject> {
        let (store, key, url) = resolve(path)?;
        let request = {
            let (store, key) = (Arc::clone(&store), key.clone());
            runtime().spawn(async move { store.get(&key).await })
        };
        Ok(PendingObject {
            store,
            key,
            url,
            read_ahead,
            request: Some(request),
        })
    }

    /// Its length when opened.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it was empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Fills `out` with the bytes at `offset`: from the open GET when the read continues it,
    /// else from a new one (large reads) or the cached blocks (small ones).
    pub fn read_exact_at(&self, out: &mut [u8], offset: u64) -> io::Result<()> {
        if out.is_empty() {
            return Ok(());
        }
        let end = offset + out.len() as u64;
        if end > self.len {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let continues = open
            .as_ref()
            .is_some_and(|get| get.at <= offset && offset - get.at <= SKIP);
        if continues || open.is_none() || out.len() as u64 >= BLOCK {
            return self.read_on(&mut open, out, offset);
        }
        drop(open);
        self.read_blocks(out, offset)
    }

    /// Fills `out` from the open GET, opened at `offset` when there is none there (or the one
    /// there fails: opened again once, at the same place).
    fn read_on(&self, open: &mut Option<OpenGet>, out: &mut [u8], offset: u64) -> io::Result<()> {
        let mut retried = false;
        loop {
            let usable = open
                .as_ref()
                .is_some_and(|get| get.at <= offset && offset - get.at <= SKIP);
            if !usable {
                *open = None;
                let options = object_store::GetOptions {
                    range: Some(object_store::GetRange::Offset(offset)),
                    ..object_store::GetOptions::default()
                };
                let got = block(self.store.get_opts(&self.key, options))
                    .map_err(|err| convert(&self.url, "read", err))?;
                *open = Some(OpenGet {
                    at: offset,
                    rest: bytes::Bytes::new(),
                    body: got.into_stream(),
                });
            }
            let Some(get) = open.as_mut() else {
                return Err(io::ErrorKind::UnexpectedEof.into());
            };
            // Most small reads are in the chunk already received: no trip to the runtime.
            let skip = (offset - get.at) as usize;
            if let Some(bytes) = get.rest.get(skip..skip + out.len()) {
                out.copy_from_slice(bytes);
                bytes::Buf::advance(&mut get.rest, skip + out.len());
                get.at = offset + out.len() as u64;
                return Ok(());
            }
            match block(fill(get, out, offset, &self.url)) {
                Ok(()) => return Ok(()),
                Err(err) => {
                    *open = None;
                    if retried || err.kind() == io::ErrorKind::UnexpectedEof {
                        return Err(err);
                    }
                    retried = true;
                }
            }
        }
    }

    /// Fills `out` (smaller than a block) with the bytes at `offset` through the cached
    /// blocks.
    fn read_blocks(&self, out: &mut [u8], offset: u64) -> io::Result<()> {
        let end = offset + out.len() as u64;
        let mut at = offset;
        while at < end {
            let index = at / BLOCK;
            let bytes = self.block(index)?;
            let start = (at - index * BLOCK) as usize;
            let stop = ((end - index * BLOCK) as usize).min(bytes.len());
            if start >= stop {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            let into = (at - offset) as usize;
            out[into..into + stop - start].copy_from_slice(&bytes[start..stop]);
            at += (stop - start) as u64;
        }
        Ok(())
    }

    /// Block `index`, from the cache or fetched (and cached, the oldest block dropped).
    fn block(&self, index: u64) -> io::Result<bytes::Bytes> {
        let cached = |blocks: &std::collections::VecDeque<(u64, bytes::Bytes)>| {
            blocks
                .iter()
                .find(|(at, _)| *at == index)
                .map(|(_, bytes)| bytes.clone())
        };
        if let Some(bytes) = cached(&self.blocks.lock().unwrap_or_else(|p| p.into_inner())) {
            return Ok(bytes);
        }
        let start = index * BLOCK;
        let bytes = self.get(start..(start + BLOCK).min(self.len))?;
        let mut blocks = self.blocks.lock().unwrap_or_else(|p| p.into_inner());
        if cached(&blocks).is_none() {
            if blocks.len() == CACHED {
                blocks.pop_front();
            }
            blocks.push_back((index, bytes.clone()));
        }
        Ok(bytes)
    }

    /// One ranged GET.
    fn get(&self, range: Range<u64>) -> io::Result<bytes::Bytes> {
        let want = (range.end - range.start) as usize;
        let bytes = block(self.store.get_range(&self.key, range))
            .map_err(|err| convert(&self.url, "read", err))?;
        if bytes.len() != want {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Ok(bytes)
    }

    /// Reads `ranges` with concurrent requests (the store coalesces close ranges).
    pub fn read_ranges(&self, ranges: &[Range<u64>]) -> io::Result<Vec<Vec<u8>>> {
        let got = block(self.store.get_ranges(&self.key, ranges))
            .map_err(|err| convert(&self.url, "read", err))?;
        Ok(got.into_iter().map(|bytes| bytes.to_vec()).collect())
    }
}

/// An object being opened by [`ObjectBlob::open_ahead`]: its GET sent, the answer not yet
/// taken. Dropped unwaited, the request is cancelled.
#[derive(Debug)]
pub struct PendingObject {
    store: Arc<dyn ObjectStore>,
    key: Key,
    url: String,
    read_ahead: usize,
    /// Always there until `wait` takes it.
    request: Option<tokio::task::JoinHandle<object_store::Result<object_store::GetResult>>>,
}

impl PendingObject {
    /// The opened object, its GET the open one (its body received ahead of the reads, at most
    /// `read_ahead` bytes held), or why it cannot be read (as [`ObjectBlob::open`] says it).
    pub fn wait(mut self) -> io::Result<ObjectBlob> {
        let Some(request) = self.request.take() else {
            return Err(io::Error::other("the object's request was taken already"));
        };
        let got = match block(request) {
            Ok(got) => got.map_err(|err| convert(&self.url, "open", err))?,
            Err(err) => return Err(io::Error::other(err.to_string())),
        };
        let len = got.meta.size;
        Ok(ObjectBlob {
            store: Arc::clone(&self.store),
            key: self.key.clone(),
            url: std::mem::take(&mut self.url),
            len,
            blocks: Mutex::default(),
            open: Mutex::new(Some(OpenGet {
                at: 0,
                rest: bytes::Bytes::new(),
                body: read_ahead(got.into_stream(), self.read_ahead),
            })),
        })
    }
}

impl Drop for PendingObject {
    fn drop(&mut self) {
        if let Some(request) = self.request.take() {
            request.abort();
        }
    }
}

/// `body`, received ahead of its reader by a task of the storage runtime: at most `limit`
/// bytes are held between them (the task waits while they are; a larger chunk waits for all
/// of them). Dropping the stream stops the task and drops `body` (its connection).
fn read_ahead(
    mut body: futures::stream::BoxStream<'static, object_store::Result<bytes::Bytes>>,
    limit: usize,
) -> futures::stream::BoxStream<'static, object_store::Result<bytes::Bytes>> {
    use futures::StreamExt;
    let limit = u32::try_from(limit.max(1)).unwrap_or(u32::MAX);
    let budget = Arc::new(tokio::sync::Semaphore::new(limit as usize));
    let (send, receive) = tokio::sync::mpsc::unbounded_channel();
    let pump = runtime().spawn(async move {
        while let Some(chunk) = body.next().await {
            let chunk = match chunk {
                Ok(bytes) => {
                    let permits = u32::try_from(bytes.len()).unwrap_or(u32::MAX).min(limit);
                    match Arc::clone(&budget).acquire_many_owned(permits).await {
                        Ok(permit) => Ok((bytes, permit)),
                        Err(_) => return,
                    }
                }
                Err(err) => Err(err),
            };
            let failed = chunk.is_err();
            if send.send(chunk).is_err() || failed {
                return;
            }
        }
    });
    let stop = AbortOnDrop(pump.abort_handle());
    futures::stream::unfold((receive, stop), |(mut receive, stop)| async move {
        // The chunk's permits go back as it is taken: what is held is the chunks waiting here
        // and the one being read.
        let chunk = receive.recv().await?;
        Some((chunk.map(|(bytes, _permit)| bytes), (receive, stop)))
    })
    .boxed()
}

/// Aborts a task of the storage runtime when dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Takes the bytes at `offset` (at or after `get.at`) from `get`'s body into `out`, dropping
/// those before them.
async fn fill(get: &mut OpenGet, out: &mut [u8], offset: u64, url: &str) -> io::Result<()> {
    use futures::StreamExt;
    let mut filled = 0;
    while filled < out.len() {
        if get.rest.is_empty() {
            get.rest = match get.body.next().await {
                Some(Ok(chunk)) => chunk,
                Some(Err(err)) => return Err(convert(url, "read", err)),
                None => return Err(io::ErrorKind::UnexpectedEof.into()),
            };
            continue;
        }
        if get.at < offset {
            let skip = (offset - get.at).min(get.rest.len() as u64) as usize;
            bytes::Buf::advance(&mut get.rest, skip);
            get.at += skip as u64;
            continue;
        }
        let take = (out.len() - filled).min(get.rest.len());
        out[filled..filled + take].copy_from_slice(&get.rest[..take]);
        bytes::Buf::advance(&mut get.rest, take);
        filled += take;
        get.at += take as u64;
    }
    Ok(())
}

/// The whole object at URL `path`.
pub fn read(path: &Path) -> io::Result<Vec<u8>> {
    let (store, key, url) = resolve(path)?;
    block(async {
        let got = store.get(&key).await?;
        got.bytes().await
    })
    .map(Vec::from)
    .map_err(|err| convert(&url, "read", err))
}

/// The whole objects at URLs `first` and `second`, their GETs sent together.
pub fn read_pair(first: &Path, second: &Path) -> (io::Result<Vec<u8>>, io::Result<Vec<u8>>) {
    let (first, second) = (resolve(first), resolve(second));
    let get = |resolved: io::Result<(Arc<dyn ObjectStore>, Key, String)>| async move {
        let (store, key, url) = resolved?;
        let got = async { store.get(&key).await?.bytes().await }.await;
        got.map(Vec::from).map_err(|err| convert(&url, "read", err))
    };
    block(futures::future::join(get(first), get(second)))
}

/// The object at URL `path`, or `None` when there is none.
pub fn head(path: &Path) -> io::Result<Option<Meta>> {
    let (store, key, url) = resolve(path)?;
    match block(store.head(&key)) {
        Ok(meta) => Ok(Some(Meta {
            size: meta.size,
            e_tag: meta.e_tag,
        })),
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(err) => Err(convert(&url, "look up", err)),
    }
}

/// Puts `bytes` as the whole object at URL `path`, as `mode` allows; returns its entity tag.
pub fn put(path: &Path, bytes: Vec<u8>, mode: Put) -> io::Result<Option<String>> {
    super::local::check()?;
    let (store, key, url) = resolve(path)?;
    put_key(&store, &key, &url, bytes, mode)
}

/// [`put`] of a resolved URL.
fn put_key(
    store: &Arc<dyn ObjectStore>,
    key: &Key,
    url: &str,
    bytes: Vec<u8>,
    mode: Put,
) -> io::Result<Option<String>> {
    let mode = match mode {
        Put::Overwrite => PutMode::Overwrite,
        Put::Create => PutMode::Create,
        Put::Update(e_tag) => PutMode::Update(UpdateVersion {
            e_tag: Some(e_tag),
            version: None,
        }),
    };
    let options = PutOptions {
        mode,
        ..PutOptions::default()
    };
    block(store.put_opts(key, PutPayload::from(bytes), options))
        .map(|done| done.e_tag)
        .map_err(|err| convert(url, "write", err))
}

/// Uploads the local file `from` as the object at URL `to` (in parts of `PART_SIZE`, a few
/// in flight, when it is larger: memory stays bounded whatever the file's size).
pub fn upload_file(from: &Path, to: &Path) -> io::Result<()> {
    super::local::check()?;
    let mut file = std::fs::File::open(from)?;
    let len = file.metadata()?.len();
    if len <= PART_SIZE as u64 {
        let mut bytes = Vec::with_capacity(len as usize);
        file.read_to_end(&mut bytes)?;
        return put(to, bytes, Put::Overwrite).map(|_| ());
    }
    let (store, key, url) = resolve(to)?;
    block(async {
        let upload = store.put_multipart(&key).await?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
        let mut chunk = vec![0u8; PART_SIZE];
        loop {
            let n =
                read_full(&mut file, &mut chunk).map_err(|err| object_store::Error::Generic {
                    store: "local file",
                    source: Box::new(err),
                })?;
            if n == 0 {
                break;
            }
            if let Err(err) = writer.wait_for_capacity(PARTS_IN_FLIGHT).await {
                let _ = writer.abort().await;
                return Err(err);
            }
            writer.write(&chunk[..n]);
        }
        writer.finish().await.map(|_| ())
    })
    .map_err(|err| convert(&url, "upload", err))
}

/// An object uploaded while it is being written: the bytes handed to [`Upload::write`] go out
/// in parts of `PART_SIZE` as soon as a part fills (a few in flight: `write` waits while
/// they are), yet nothing is visible at the key until [`Upload::complete`] (a multipart upload
/// lands whole when completed). An object of at most one part is one put at `complete`, as
/// [`upload_file`] makes it. Dropped without completing, the parts sent are aborted.
pub struct Upload {
    store: Arc<dyn ObjectStore>,
    key: Key,
    url: String,
    /// The bytes written while they fit in one part (then the multipart upload starts).
    pending: Vec<u8>,
    multipart: Option<WriteMultipart>,
    /// Why a part could not be sent: `complete` fails with it (later bytes are dropped).
    failed: Option<io::Error>,
}

impl std::fmt::Debug for Upload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upload")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl Upload {
    /// An upload to the object at URL `path` (no request yet).
    pub fn start(path: &Path) -> io::Result<Upload> {
        let (store, key, url) = resolve(path)?;
        Ok(Upload {
            store,
            key,
            url,
            pending: Vec::new(),
            multipart: None,
            failed: None,
        })
    }

    /// Appends `bytes` to the object. A store error is kept for [`Upload::complete`], so the
    /// writer feeding it goes on and reports it there, naming the object.
    pub fn write(&mut self, bytes: &[u8]) {
        if self.failed.is_some() {
            return;
        }
        if let Err(err) = self.send(bytes) {
            self.failed = Some(convert(&self.url, "upload", err));
            if let Some(multipart) = self.multipart.take() {
                abort(multipart);
            }
        }
    }

    /// Keeps `bytes` while the object fits in one part, else sends them (starting the
    /// multipart upload with what was kept): never more than about `PARTS_IN_FLIGHT + 1`
    /// parts held, however large `bytes` (a whole tensor) is.
    fn send(&mut self, bytes: &[u8]) -> object_store::Result<()> {
        let multipart = match self.multipart.as_mut() {
            Some(multipart) => multipart,
            None if self.pending.len() + bytes.len() <= PART_SIZE => {
                self.pending.extend_from_slice(bytes);
                return Ok(());
            }
            None => {
                let upload = block(self.store.put_multipart(&self.key))?;
                self.multipart
                    .insert(WriteMultipart::new_with_chunk_size(upload, PART_SIZE))
            }
        };
        let pending = std::mem::take(&mut self.pending);
        block(async {
            for part in pending.chunks(PART_SIZE).chain(bytes.chunks(PART_SIZE)) {
                multipart.wait_for_capacity(PARTS_IN_FLIGHT).await?;
                multipart.write(part);
            }
            Ok(())
        })
    }

    /// Finishes the upload: from here on the object is at its key, whole.
    pub fn complete(mut self) -> io::Result<()> {
        super::local::check()?;
        if let Some(err) = self.failed.take() {
            return Err(err);
        }
        match self.multipart.take() {
            Some(multipart) => block(multipart.finish())
                .map(|_| ())
                .map_err(|err| convert(&self.url, "upload", err)),
            None => {
                let bytes = std::mem::take(&mut self.pending);
                put_key(&self.store, &self.key, &self.url, bytes, Put::Overwrite).map(|_| ())
            }
        }
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        if let Some(multipart) = self.multipart.take() {
            abort(multipart);
        }
    }
}

/// Aborts a multipart upload once its parts in flight are done: a part that lands after the
/// abort would be kept by the store (S3 says to abort again), or fail there.
fn abort(mut multipart: WriteMultipart) {
    block(async {
        // Each error takes one part off the ones in flight.
        while multipart.wait_for_capacity(0).await.is_err() {}
        let _ = multipart.abort().await;
    });
}

/// Reads until `out` is full or the file ends; the number of bytes read.
fn read_full(file: &mut std::fs::File, out: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < out.len() {
        match file.read(&mut out[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

/// Copies the object `from` to `to` inside the store (no bytes through this process).
pub fn copy(from: &Path, to: &Path) -> io::Result<()> {
    super::local::check()?;
    let (store, from_key, url) = resolve(from)?;
    let (_, to_key, _) = resolve(to)?;
    block(store.copy(&from_key, &to_key)).map_err(|err| convert(&url, "copy", err))
}

/// Deletes the object at URL `path` (an absent object is not an error).
pub fn delete(path: &Path) -> io::Result<()> {
    super::local::check()?;
    let (store, key, url) = resolve(path)?;
    match block(store.delete(&key)) {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
        Err(err) => Err(convert(&url, "delete", err)),
    }
}

/// The objects whose URL starts with the text of `prefix` (`s3://b/run/ckpt` lists
/// `s3://b/run/ckpt.index`, `s3://b/run/ckpt_temp/part…`), with their sizes, sorted.
pub fn list(prefix: &Path) -> io::Result<Vec<(PathBuf, u64)>> {
    let (store, key, url) = resolve(prefix)?;
    let text = key.as_ref().to_string();
    let dir = text.rsplit_once('/').map(|(dir, _)| Key::from(dir));
    let base = url
        .strip_suffix(&text)
        .unwrap_or(url.as_str())
        .trim_end_matches('/')
        .to_string();
    let found: Vec<object_store::ObjectMeta> =
        block(store.list(dir.as_ref()).try_collect()).map_err(|err| convert(&url, "list", err))?;
    let mut found: Vec<(PathBuf, u64)> = found
        .into_iter()
        .filter(|meta| meta.location.as_ref().starts_with(text.as_str()))
        .map(|meta| {
            (
                PathBuf::from(format!("{base}/{}", meta.location)),
                meta.size,
            )
        })
        .collect();
    found.sort();
    Ok(found)
}

/// The store, key and URL text of URL `path`.
fn resolve(path: &Path) -> io::Result<(Arc<dyn ObjectStore>, Key, String)> {
    let text = path
        .to_str()
        .ok_or_else(|| bad_url(&path.to_string_lossy(), "not UTF-8"))?;
    let url = url::Url::parse(text).map_err(|err| bad_url(text, &err.to_string()))?;
    let key = Key::from_url_path(url.path()).map_err(|err| bad_url(text, &one_line(&err)))?;
    if key.as_ref().is_empty() {
        return Err(bad_url(text, "no object key after the bucket"));
    }
    Ok((store_for(&url, text)?, key, text.to_string()))
}

fn bad_url(url: &str, detail: &str) -> io::Error {
    StorageError::BadUrl {
        url: url.to_string(),
        detail: detail.to_string(),
    }
    .into_io(io::ErrorKind::InvalidInput)
}

/// The store of `url`'s scheme and bucket, built on first use.
fn store_for(url: &url::Url, text: &str) -> io::Result<Arc<dyn ObjectStore>> {
    static STORES: OnceLock<Mutex<HashMap<String, Arc<dyn ObjectStore>>>> = OnceLock::new();
    let bucket = url.host_str().unwrap_or_default();
    let id = format!("{}://{bucket}", url.scheme());
    let mut stores = STORES
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(store) = stores.get(&id) {
        return Ok(Arc::clone(store));
    }
    let store = build(url, &id).map_err(|err| match err {
        Built::Bad(detail) => bad_url(text, &detail),
        Built::Store(err) => convert(text, "connect", err),
    })?;
    stores.insert(id, Arc::clone(&store));
    Ok(store)
}

/// Why a store could not be built.
enum Built {
    Bad(String),
    Store(object_store::Error),
}

fn build(url: &url::Url, id: &str) -> Result<Arc<dyn ObjectStore>, Built> {
    // reqwest's rustls is built without a crypto provider (ring is installed here, so that no
    // C toolchain beyond cc is needed); installing twice is harmless.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let retry = RetryConfig {
        max_retries: 2,
        retry_timeout: Duration::from_secs(10),
        ..RetryConfig::default()
    };
    let client = ClientOptions::new()
        .with_connect_timeout(Duration::from_secs(5))
        .with_timeout(Duration::from_secs(300));
    let store: Arc<dyn ObjectStore> = match url.scheme() {
        "memory" => Arc::new(object_store::memory::InMemory::new()),
        "s3" | "s3a" => {
            let mut builder = object_store::aws::AmazonS3Builder::from_env()
                .with_url(id)
                .with_conditional_put(object_store::aws::S3ConditionalPut::ETagMatch)
                .with_retry(retry);
            let allow_http = std::env::var("AWS_ALLOW_HTTP")
                .is_ok_and(|value| matches!(value.to_ascii_lowercase().as_str(), "true" | "1"));
            builder = builder.with_client_options(client.with_allow_http(allow_http));
            Arc::new(builder.build().map_err(Built::Store)?)
        }
        "gs" => Arc::new(
            object_store::gcp::GoogleCloudStorageBuilder::from_env()
                .with_url(id)
                .with_retry(retry)
                .with_client_options(client)
                .build()
                .map_err(Built::Store)?,
        ),
        "az" | "azure" | "abfs" | "abfss" => Arc::new(
            object_store::azure::MicrosoftAzureBuilder::from_env()
                .with_url(id)
                .with_retry(retry)
                .with_client_options(client)
                .build()
                .map_err(Built::Store)?,
        ),
        other => {
            return Err(Built::Bad(format!(
                "unsupported scheme `{other}` (s3, gs, az and memory are)"
            )));
        }
    };
    Ok(store)
}

/// An `object_store` error as a one-line `io::Error` of the matching kind.
fn convert(url: &str, op: &'static str, err: object_store::Error) -> io::Error {
    use object_store::Error as E;
    let kind = match &err {
        E::NotFound { .. } => io::ErrorKind::NotFound,
        E::AlreadyExists { .. } | E::Precondition { .. } => io::ErrorKind::AlreadyExists,
        E::NotSupported { .. } | E::NotImplemented { .. } => io::ErrorKind::Unsupported,
        E::PermissionDenied { .. } | E::Unauthenticated { .. } => io::ErrorKind::PermissionDenied,
        _ => io::ErrorKind::Other,
    };
    let text = one_line(&err);
    let detail = match kind {
        io::ErrorKind::NotFound if matches!(op, "write" | "upload" | "copy" | "list") => {
            match url.split_once("://").map(|(scheme, _)| scheme) {
                Some("az" | "azure" | "abfs" | "abfss") => "no such container".to_string(),
                _ => "no such bucket".to_string(),
            }
        }
        io::ErrorKind::NotFound => "no such object".to_string(),
        io::ErrorKind::AlreadyExists => "already exists (a conditional put lost)".to_string(),
        io::ErrorKind::PermissionDenied => match short(&text).rsplit_once(": ") {
            Some((_, message)) if text.contains("<?xml") => {
                format!("access denied (check the credentials): {message}")
            }
            _ => "access denied (check the credentials)".to_string(),
        },
        _ => match text.find("tcp connect error") {
            Some(at) => format!("cannot connect to the store: {}", &text[at..]),
            None => match text.split_once("error sending request") {
                Some((_, rest)) => format!("cannot reach the store{rest}"),
                None => short(&text),
            },
        },
    };
    StorageError::Store {
        url: url.to_string(),
        op,
        detail,
    }
    .into_io(kind)
}

/// A store's message without the response body and request ids it quotes (the XML's `Code`
/// and `Message` are kept).
fn short(text: &str) -> String {
    let Some((head, xml)) = text.split_once("<?xml") else {
        return text.to_string();
    };
    let field = |name: &str| {
        let open = format!("<{name}>");
        let (_, rest) = xml.split_once(open.as_str())?;
        rest.split_once('<').map(|(value, _)| value.to_string())
    };
    let head = head.trim_end().trim_end_matches(':');
    match (field("Code"), field("Message")) {
        (Some(code), Some(message)) => format!("{head}: {code}: {message}"),
        _ => head.to_string(),
    }
}

/// An error and its sources on one line, without repeats.
fn one_line(err: &impl std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(next) = source {
        let more = next.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = next.source();
    }
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Runs `future` to its end on the storage runtime.
fn block<F: std::future::Future>(future: F) -> F::Output {
    runtime().block_on(future)
}

/// The storage runtime, started on first use.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("saveplan-storage")
            .enable_all()
            .build()
            .unwrap_or_else(|err| panic!("cannot start the storage runtime: {err}"))
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use futures::StreamExt;

    use super::*;

    /// A body of `chunks` chunks of 1,000 bytes, counting those taken from it in `taken`, and
    /// holding `alive` while it lives.
    fn body(
        chunks: usize,
        taken: Arc<AtomicUsize>,
        alive: Arc<()>,
    ) -> futures::stream::BoxStream<'static, object_store::Result<bytes::Bytes>> {
        futures::stream::iter(0..chunks)
            .map(move |at| {
                let _ = &alive;
                taken.fetch_add(1, Ordering::SeqCst);
                Ok(bytes::Bytes::from(vec![at as u8; 1000]))
            })
            .boxed()
    }

    /// Waits (up to 10 s) until `done`, then a little more, so that a task that would go too
    /// far has the time to.
    fn settle(done: impl Fn() -> bool) {
        let started = std::time::Instant::now();
        while !done() && started.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(50));
    }

    #[test]
    fn a_body_read_ahead_holds_at_most_its_limit_and_stops_when_dropped() {
        let (taken, alive) = (Arc::new(AtomicUsize::new(0)), Arc::new(()));
        let mut ahead = read_ahead(body(100, Arc::clone(&taken), Arc::clone(&alive)), 3000);
        // Three chunks held, the fourth taken and waiting for room.
        settle(|| taken.load(Ordering::SeqCst) >= 4);
        assert_eq!(taken.load(Ordering::SeqCst), 4);
        let first = block(ahead.next()).unwrap().unwrap();
        assert_eq!(first, vec![0u8; 1000]);
        settle(|| taken.load(Ordering::SeqCst) >= 5);
        assert_eq!(taken.load(Ordering::SeqCst), 5);
        let rest: Vec<bytes::Bytes> = block(ahead.map(|chunk| chunk.unwrap()).collect());
        assert_eq!(rest.len(), 99);
        assert!(
            rest.iter()
                .enumerate()
                .all(|(at, chunk)| chunk[0] == at as u8 + 1)
        );

        let (taken, alive) = (Arc::new(AtomicUsize::new(0)), Arc::new(()));
        let ahead = read_ahead(body(100, Arc::clone(&taken), Arc::clone(&alive)), 3000);
        settle(|| taken.load(Ordering::SeqCst) >= 4);
        assert_eq!(Arc::strong_count(&alive), 2, "the body is held by the task");
        drop(ahead);
        settle(|| Arc::strong_count(&alive) == 1);
        assert_eq!(
            Arc::strong_count(&alive),
            1,
            "the body was dropped with the stream"
        );
    }
}
