//! Filesystem tools, the daily driver done safely: list, read, write and search files in
//! the directories this call may use. The host decides what those are (the operator's
//! grants, narrowed to the client's roots) and opens only them; this plugin cannot reach
//! anything else, whatever path it is given. It only explains failures well.

use std::fs;
use std::io::{ErrorKind, Read};
use std::path::{Component, Path, PathBuf};

use capsule_sdk::Error;
use capsule_sdk::prelude::*;

capsule_sdk::needs!(
    r#"
dirs = "read"
"#
);

/// Files larger than this are not read whole; `read_file` says so.
const MAX_READ: u64 = 1 << 20;
/// `search_files` stops after this many matches or visited entries.
const MAX_MATCHES: usize = 500;
const MAX_VISITED: usize = 50_000;

/// Make `path` absolute: a relative path is taken from the first directory this call may use.
fn resolve(cx: &Context, path: &str) -> Result<PathBuf, String> {
    let path = Path::new(path);
    if path.is_absolute() {
        return Ok(path.to_path_buf());
    }
    match cx.mounts().first() {
        Some(mount) => Ok(Path::new(&mount.path).join(path)),
        None => Err(no_directories()),
    }
}

fn no_directories() -> String {
    "no directories are available to this tool: the server grants it none, or none of the client's roots lies \
     within its grants"
        .into()
}

/// The path with `.` and `..` folded away lexically, to compare it with the mounts.
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Turn an I/O error into a sentence that tells the model what it may do instead.
fn explain(cx: &Context, action: &str, path: &Path, error: std::io::Error) -> String {
    let mounts = cx.mounts();
    if mounts.is_empty() {
        return no_directories();
    }
    let folded = lexical(path);
    let mount = mounts.iter().filter(|m| folded.starts_with(&m.path)).max_by_key(|m| m.path.len());
    let visible = mounts.iter().map(|m| m.path.as_str()).collect::<Vec<_>>().join(", ");
    match (mount, error.kind()) {
        (None, _) => {
            format!("cannot {action} {}: it is outside the directories this tool may use ({visible})", path.display())
        }
        (Some(m), ErrorKind::PermissionDenied | ErrorKind::ReadOnlyFilesystem)
            if !m.writable && action != "read" && action != "list" =>
        {
            format!("cannot {action} {}: {} is read-only for this tool", path.display(), m.path)
        }
        (Some(_), ErrorKind::NotFound) => format!("cannot {action} {}: it does not exist", path.display()),
        (Some(_), ErrorKind::PermissionDenied) => format!(
            "cannot {action} {}: not permitted (a symlink leading outside the allowed directories, a FIFO, socket \
             or device, which the host never opens, or a file the server itself may not access)",
            path.display()
        ),
        (Some(_), _) => format!("cannot {action} {}: {error}", path.display()),
    }
}

#[derive(Deserialize, JsonSchema)]
struct PathArgs {
    /// An absolute path inside one of the allowed directories (see `list_roots`); a relative
    /// path starts from the first of them.
    path: String,
}

#[derive(Serialize, JsonSchema)]
struct Entry {
    /// The entry's name.
    name: String,
    /// `file`, `directory`, `symlink` or `other`.
    kind: &'static str,
    /// Size in bytes, for files.
    #[serde(skip_serializing_if = "Option::is_none")]
    size: Option<u64>,
}

#[derive(Serialize, JsonSchema)]
struct Listing {
    /// The directory listed.
    path: String,
    /// Its entries, sorted by name.
    entries: Vec<Entry>,
}

fn kind_of(file_type: fs::FileType) -> &'static str {
    if file_type.is_symlink() {
        "symlink"
    } else if file_type.is_dir() {
        "directory"
    } else if file_type.is_file() {
        "file"
    } else {
        "other"
    }
}

fn list_directory(args: PathArgs, cx: &Context) -> Result<Json<Listing>, String> {
    let path = resolve(cx, &args.path)?;
    let read = fs::read_dir(&path).map_err(|e| explain(cx, "list", &path, e))?;
    let mut entries = Vec::new();
    for entry in read {
        let entry = entry.map_err(|e| explain(cx, "list", &path, e))?;
        let file_type = entry.file_type().map_err(|e| explain(cx, "list", &entry.path(), e))?;
        let size = if file_type.is_file() { entry.metadata().ok().map(|m| m.len()) } else { None };
        entries.push(Entry { name: entry.file_name().to_string_lossy().into_owned(), kind: kind_of(file_type), size });
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Json(Listing { path: path.display().to_string(), entries }))
}

fn read_file(args: PathArgs, cx: &Context) -> Result<String, String> {
    let path = resolve(cx, &args.path)?;
    let file = fs::File::open(&path).map_err(|e| explain(cx, "read", &path, e))?;
    let size = file.metadata().map_err(|e| explain(cx, "read", &path, e))?.len();
    if size > MAX_READ {
        return Err(format!("{} is {size} bytes; this tool reads files up to {MAX_READ} bytes", path.display()));
    }
    let mut bytes = Vec::with_capacity(size as usize);
    file.take(MAX_READ).read_to_end(&mut bytes).map_err(|e| explain(cx, "read", &path, e))?;
    String::from_utf8(bytes).map_err(|_| format!("{} is not UTF-8 text", path.display()))
}

#[derive(Deserialize, JsonSchema)]
struct WriteArgs {
    /// An absolute path inside one of the writable directories (see `list_roots`).
    path: String,
    /// The file's new content, as UTF-8 text. An existing file is replaced.
    content: String,
}

fn write_file(args: WriteArgs, cx: &Context) -> Result<String, String> {
    let path = resolve(cx, &args.path)?;
    fs::write(&path, args.content.as_bytes()).map_err(|e| explain(cx, "write", &path, e))?;
    // Clients subscribed to the file (or a directory above it) hear that it changed.
    cx.resource_updated(&file_uri(&lexical(&path)));
    Ok(format!("wrote {} bytes to {}", args.content.len(), path.display()))
}

/// A file's `file://` URI: its absolute path with every byte but unreserved ones and `/`
/// percent-encoded, as Python's `Path.as_uri` and Node's `pathToFileURL` write most paths.
fn file_uri(path: &Path) -> String {
    let mut uri = String::from("file://");
    for &byte in path.as_os_str().as_encoded_bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~/".contains(&byte) {
            uri.push(byte as char);
        } else {
            uri.push_str(&format!("%{byte:02X}"));
        }
    }
    uri
}

/// Read a file as the resource `file:///{+path}`. A URI naming anything but a UTF-8 text file
/// of at most 1 MiB that this call may read (a directory, a larger or binary file, one outside
/// the directories) names no resource this template serves: not found, with the reason, rather
/// than a failure of the server's.
fn read_resource(vars: UriVariables, cx: &Context) -> Result<String, Error> {
    let path = format!("/{}", vars.get("path").unwrap_or_default());
    read_file(PathArgs { path }, cx).map_err(Error::NotFound)
}

#[derive(Deserialize, JsonSchema)]
struct SearchArgs {
    /// The directory to search, recursively.
    path: String,
    /// A file-name pattern, case-insensitive: `*` matches any run of characters and `?` one
    /// character; without either, any name containing the text matches.
    pattern: String,
}

/// Glob match over chars: `*` any run, `?` one char.
fn glob(pattern: &[char], name: &[char]) -> bool {
    let (mut p, mut n, mut star, mut mark) = (0, 0, None, 0);
    while n < name.len() {
        if p < pattern.len() && (pattern[p] == '?' || pattern[p] == name[n]) {
            p += 1;
            n += 1;
        } else if p < pattern.len() && pattern[p] == '*' {
            star = Some(p);
            mark = n;
            p += 1;
        } else if let Some(s) = star {
            p = s + 1;
            mark += 1;
            n = mark;
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == '*')
}

fn search_files(args: SearchArgs, cx: &Context) -> Result<String, String> {
    let root = resolve(cx, &args.path)?;
    let lowered = args.pattern.to_lowercase();
    let pattern: Vec<char> =
        if lowered.contains(['*', '?']) { lowered.chars().collect() } else { format!("*{lowered}*").chars().collect() };
    let mut matches = Vec::new();
    let mut visited = 0;
    let mut stack = vec![root.clone()];
    fs::metadata(&root).map_err(|e| explain(cx, "search", &root, e))?;
    while let Some(dir) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            visited += 1;
            let name: Vec<char> = entry.file_name().to_string_lossy().to_lowercase().chars().collect();
            if glob(&pattern, &name) {
                matches.push(entry.path().display().to_string());
            }
            // Symlinks are reported, never followed.
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(entry.path());
            }
            if matches.len() >= MAX_MATCHES || visited >= MAX_VISITED {
                matches.sort();
                matches.push(format!("(stopped after {} matches and {visited} entries)", matches.len()));
                return Ok(matches.join("\n"));
            }
        }
    }
    if matches.is_empty() {
        return Ok(format!("no names under {} match {:?}", root.display(), args.pattern));
    }
    matches.sort();
    Ok(matches.join("\n"))
}

#[derive(Serialize, JsonSchema)]
struct Root {
    /// Absolute path to use with the other tools.
    path: String,
    /// The client's name for it, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    /// Whether `write_file` may write in it.
    writable: bool,
}

#[derive(Serialize, JsonSchema)]
struct Roots {
    /// The directories this tool may use now.
    roots: Vec<Root>,
}

fn list_roots(_: NoArgs, cx: &Context) -> Json<Roots> {
    Json(Roots {
        roots: cx.mounts().into_iter().map(|m| Root { path: m.path, name: m.name, writable: m.writable }).collect(),
    })
}

capsule_sdk::plugin!(|p| {
    p.tool("list_roots", "List the directories these tools may use, and whether each is writable", list_roots)
        .read_only();
    p.tool("list_directory", "List a directory's entries with their kind and size", list_directory).read_only();
    p.tool("read_file", "Read a UTF-8 text file (up to 1 MiB)", read_file).read_only();
    p.tool("write_file", "Create or replace a text file in a writable directory", write_file)
        .destructive()
        .idempotent();
    p.tool("search_files", "Find files and directories whose names match a pattern, recursively", search_files)
        .read_only();
    p.template("file:///{+path}", "File", Some("text/plain"), read_resource).description(
        "A UTF-8 text file (up to 1 MiB) in the directories these tools may use; subscribe to hear of writes",
    );
});
