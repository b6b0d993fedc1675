//! What a test wrote: the files and directories under a folder, relative and sorted.

use std::path::{Path, PathBuf};

/// Walks `dir`: every regular file and every directory below it, relative, sorted.
fn walk(dir: &Path) -> (Vec<String>, Vec<String>) {
    let (mut files, mut dirs) = (Vec::new(), Vec::new());
    let mut stack: Vec<PathBuf> = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for item in std::fs::read_dir(&at).unwrap() {
            let path = item.unwrap().path();
            let relative = path
                .strip_prefix(dir)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if path.is_dir() {
                dirs.push(relative);
                stack.push(path);
            } else {
                files.push(relative);
            }
        }
    }
    files.sort();
    dirs.sort();
    (files, dirs)
}

/// The files under `dir`, relative, sorted.
pub fn files_under(dir: &Path) -> Vec<String> {
    walk(dir).0
}

/// The files under `dir` with their bytes, sorted by name.
pub fn file_bytes_under(dir: &Path) -> Vec<(String, Vec<u8>)> {
    files_under(dir)
        .into_iter()
        .map(|name| {
            let bytes = std::fs::read(dir.join(&name)).unwrap();
            (name, bytes)
        })
        .collect()
}

/// The directories under `dir`, relative, sorted.
pub fn dirs_under(dir: &Path) -> Vec<String> {
    walk(dir).1
}
