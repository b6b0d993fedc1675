//! TensorFlow's unique node names (`Graph.unique_name` in `framework/ops.py`).

use std::hash::BuildHasher;

use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;

/// Hands out unique node names the way a `tf.Graph` does: the first use of a name keeps it,
/// later uses get `_1`, `_2`, … suffixes, and names compare case-insensitively.
///
/// TensorFlow keeps a counter per lower-cased name in use (`_names_in_use`), so every call is
/// O(1) amortized and tracing many variables stays linear. This table keeps the same counters
/// in a tree of name scopes: a node per `/`-separated component, holding the counter of the
/// name that ends there (0 when the name is only a scope of other names, not in use itself).
/// Semantically it is TensorFlow's flat table; the tree is for memory locality. A plan names
/// most ops inside the scope of the op just named (`v`, `v/Read`, `v/Read/ReadVariableOp`,
/// `v/Assign`, …): in a flat table each of those is a probe at a random place of a table of
/// millions of slots, a cache miss apiece, while here they are found among the few children
/// of a node made a moment before. Only a node with many children (the root, a `save` scope)
/// has a hash table of them; the others list theirs.
///
/// The components' text lives back to back in fixed-size chunks that are never reallocated,
/// so a name costs no allocation of its own.
///
/// Names made by suffixing (`Identity_7`, `AssignVariableOp_7`, `zeros_7`: two or three per
/// variable of a plan) are not stored. TensorFlow's counter of a name `b` only moves past `i`
/// once `b_i` is in use, so every `b_i` below the counter is in use. While nothing else of the
/// form `b_<i>` has been named in `b`'s scope, the next suffix is free without a lookup, and
/// `b_i` with `i` below the point up to which suffixes were handed out so
/// (`implicit_below`) is in use with a counter of 1, stored when it is next named.
#[derive(Clone, Debug)]
pub struct UniqueNames {
    /// Every node's lower-cased component, concatenated; a component never spans two chunks.
    chunks: Vec<String>,
    /// The nodes; node 0 is the root (the empty scope).
    nodes: Vec<Node>,
    /// The child tables of the nodes with more than [`FEW`] children: positions in `nodes`.
    tables: Vec<HashTable<u32>>,
    /// A reused buffer for the lower-cased name and candidates, so that looking a name up
    /// allocates nothing.
    scratch: String,
}

/// A name scope, and the name that ends there.
#[derive(Clone, Debug)]
struct Node {
    /// The component's hash, which a lookup compares before the component itself.
    hash: u64,
    /// The chunk holding the component.
    chunk: u32,
    /// Where the component starts in its chunk.
    start: u32,
    /// The component's length in bytes.
    len: u32,
    /// TensorFlow's counter of the name ending here: the next suffix to try; 0 when the name
    /// is not in use.
    count: u32,
    /// The number of children.
    n_children: u32,
    /// The children: when there are at most [`FEW`], the first of a list (see `next`);
    /// otherwise the position of their table in `UniqueNames::tables`.
    children: u32,
    /// The next child of the same parent, in a list of few.
    next: u32,
    /// Every `<component>_<i>` with `1 <= i < implicit_below` was handed out as a name by
    /// suffixing this one without being stored: it is in use with a counter of 1. Suffixes
    /// are handed out so while `implicit_below` is the counter and no sibling of the form
    /// `<component>_<i>` with `i` at or above the counter was ever named (`SUFFIXED`).
    implicit_below: u32,
}

/// The bit of `Node::len` set when a sibling `<component>_<i>` was named with `i` at or above
/// the node's counter: suffixing it must then look the candidates up.
const SUFFIXED: u32 = 1 << 31;

/// A name [`UniqueNames`] handed out, and the node of the tree where it ends: names inside it
/// are looked up from there.
#[derive(Clone, Debug)]
pub(crate) struct Scope {
    /// The name, as handed out.
    pub(crate) name: String,
    /// Its node.
    node: u32,
}

/// The root node: the empty scope.
const ROOT: u32 = 0;

/// The most children a node lists before it gets a hash table of them.
const FEW: u32 = 8;

/// No node.
const NONE: u32 = u32::MAX;

/// The size of a name chunk; longer components get a chunk of their own.
const CHUNK: usize = 1 << 20;

impl Node {
    fn new(hash: u64, chunk: u32, start: u32, len: u32) -> Node {
        Node {
            hash,
            chunk,
            start,
            len,
            count: 0,
            n_children: 0,
            children: NONE,
            next: NONE,
            implicit_below: 1,
        }
    }

    fn component<'a>(&self, chunks: &'a [String]) -> &'a str {
        let start = self.start as usize;
        let len = (self.len & !SUFFIXED) as usize;
        &chunks[self.chunk as usize][start..start + len]
    }
}

impl Default for UniqueNames {
    fn default() -> UniqueNames {
        UniqueNames::with_capacity(0)
    }
}

impl UniqueNames {
    /// An empty name table.
    pub fn new() -> UniqueNames {
        UniqueNames::default()
    }

    /// An empty name table with room for about `capacity` names.
    pub fn with_capacity(capacity: usize) -> UniqueNames {
        let mut nodes = Vec::with_capacity(capacity + 1);
        nodes.push(Node::new(0, 0, 0, 0));
        UniqueNames {
            chunks: Vec::new(),
            nodes,
            tables: Vec::new(),
            scratch: String::new(),
        }
    }

    /// Returns `name` or the first free `name_<i>` and marks it as used.
    ///
    /// Name scopes are marked with the same call: entering scope `a/Read` is
    /// `unique("a/Read")`, and ops inside it are `unique("a/Read/ReadVariableOp")`.
    pub fn unique(&mut self, name: &str) -> String {
        self.unique_parts(&[name])
    }

    /// [`UniqueNames::unique`] of `scope/name`, without building that string first.
    pub fn unique_in(&mut self, scope: &str, name: &str) -> String {
        self.unique_parts(&[scope, "/", name])
    }

    /// [`UniqueNames::unique`], keeping where the name ends in the tree, so that names inside
    /// it ([`UniqueNames::unique_under`], [`UniqueNames::scope_under`]) start from there
    /// instead of from the root: a variable's ops are all named inside its handle's scope.
    pub(crate) fn scope(&mut self, name: &str) -> Scope {
        self.scoped(ROOT, &[name], 0)
    }

    /// [`UniqueNames::unique_in`] of `scope`'s name and `name`, as a [`Scope`].
    pub(crate) fn scope_under(&mut self, scope: &Scope, name: &str) -> Scope {
        self.scoped(scope.node, &[&scope.name, "/", name], 2)
    }

    /// [`UniqueNames::unique_in`] of `scope`'s name and `name`.
    pub(crate) fn unique_under(&mut self, scope: &Scope, name: &str) -> String {
        self.unique_at(scope.node, &[&scope.name, "/", name], 2, false)
            .0
    }

    /// `unique` of the concatenation of `parts`.
    fn unique_parts(&mut self, parts: &[&str]) -> String {
        self.unique_at(ROOT, parts, 0, false).0
    }

    /// [`UniqueNames::unique_at`] as a [`Scope`]: the name is stored even if made by
    /// suffixing, so that it has a node.
    fn scoped(&mut self, start: u32, parts: &[&str], from: usize) -> Scope {
        let (name, node) = self.unique_at(start, parts, from, true);
        Scope { name, node }
    }

    /// `unique` of the concatenation of `parts`, given that the concatenation of
    /// `parts[..from]` is the name of node `start` (the root when `from` is 0): only the rest
    /// is looked up, from there. Returns the name and its node; a name made by suffixing is
    /// stored (with a counter of 1) only when `store` asks, and otherwise has no node
    /// ([`NONE`]).
    fn unique_at(&mut self, start: u32, parts: &[&str], from: usize, store: bool) -> (String, u32) {
        let mut key = std::mem::take(&mut self.scratch);
        key.clear();
        for part in &parts[from..] {
            lower_into(&mut key, part);
        }
        // A suffix changes only the last component: every candidate is a child of one scope.
        let (scope, last) = self.scope_of_last(start, &key);
        let node = self.child_or_new(scope, &key[last..]);
        let named = &mut self.nodes[node as usize];
        let mut i = named.count;
        named.count += 1;
        if i == 0 {
            self.scratch = key;
            return (parts.concat(), node);
        }
        if named.implicit_below == i && named.len & SUFFIXED == 0 {
            // `_i` is free: nothing of the form was named at or above the counter.
            named.implicit_below = i + 1;
            let node = if store {
                // Stored as a name suffixing handed out: in use, with a counter of 1.
                push_suffix(&mut key, i);
                self.child_or_new(scope, &key[last..])
            } else {
                NONE
            };
            self.scratch = key;
            return (suffixed(parts, i), node);
        }
        let key_len = key.len();
        let free = loop {
            key.truncate(key_len);
            push_suffix(&mut key, i);
            let candidate = &key[last..];
            let hash = hash(candidate);
            match self.find(scope, hash, candidate) {
                Some(taken) if self.nodes[taken as usize].count > 0 => i += 1,
                // Only a scope of other names so far: free as a name.
                Some(scope_only) => break scope_only,
                None => break self.add_named(scope, hash, candidate),
            }
        };
        self.nodes[free as usize].count = 1;
        self.scratch = key;
        (suffixed(parts, i), free)
    }

    /// Marks `name` as used without renaming it (for names fixed by the caller).
    pub fn mark(&mut self, name: &str) {
        let key = name.to_lowercase();
        let (scope, last) = self.scope_of_last(ROOT, &key);
        let node = self.child_or_new(scope, &key[last..]);
        self.nodes[node as usize].count += 1;
    }

    /// The node of everything before the last `/` of lower-cased `key`, below node `start`
    /// (made with its scopes if new; `start` itself for a key without `/`), and where the last
    /// component starts.
    fn scope_of_last(&mut self, start: u32, key: &str) -> (u32, usize) {
        let Some(slash) = key.rfind('/') else {
            return (start, 0);
        };
        let scope = key[..slash]
            .split('/')
            .fold(start, |node, component| self.child_or_new(node, component));
        (scope, slash + 1)
    }

    /// The child `component` of `parent`, made if new (see [`UniqueNames::add_named`]).
    fn child_or_new(&mut self, parent: u32, component: &str) -> u32 {
        let hash = hash(component);
        match self.find(parent, hash, component) {
            Some(node) => node,
            None => self.add_named(parent, hash, component),
        }
    }

    /// Adds `component` (with `hash`), which is not stored as a child of `parent` yet: in use
    /// (a counter of 1) when it is a name suffixing handed out without storing it, not in use
    /// otherwise. A new `<base>_<i>` at or above `base`'s counter marks `base` as `SUFFIXED`.
    fn add_named(&mut self, parent: u32, hash: u64, component: &str) -> u32 {
        let Some((base, i)) = split_suffix(component) else {
            return self.add_child(parent, hash, component);
        };
        let base_hash = self::hash(base);
        let base = match self.find(parent, base_hash, base) {
            Some(base) => base,
            None => self.add_named(parent, base_hash, base),
        };
        let base = &mut self.nodes[base as usize];
        let in_use = i < base.implicit_below;
        if i >= base.count {
            base.len |= SUFFIXED;
        }
        let node = self.add_child(parent, hash, component);
        if in_use {
            self.nodes[node as usize].count = 1;
        }
        node
    }

    fn find(&self, parent: u32, hash: u64, component: &str) -> Option<u32> {
        let (chunks, nodes) = (&self.chunks, &self.nodes);
        let is = |node: u32| {
            let node = &nodes[node as usize];
            node.hash == hash && node.component(chunks) == component
        };
        let parent = &nodes[parent as usize];
        if parent.n_children > FEW {
            return self.tables[parent.children as usize]
                .find(hash, |&node| is(node))
                .copied();
        }
        let mut child = parent.children;
        while child != NONE {
            if is(child) {
                return Some(child);
            }
            child = nodes[child as usize].next;
        }
        None
    }

    /// Adds `component` (with `hash`), which is not a child of `parent` yet.
    fn add_child(&mut self, parent: u32, hash: u64, component: &str) -> u32 {
        let fits = self
            .chunks
            .last()
            .is_some_and(|chunk| chunk.capacity() - chunk.len() >= component.len());
        if !fits {
            self.chunks
                .push(String::with_capacity(CHUNK.max(component.len())));
        }
        let chunk_index = self.chunks.len() - 1;
        let chunk = &mut self.chunks[chunk_index];
        let start = chunk.len();
        chunk.push_str(component);
        // Components are far shorter than 4 GiB and there are far fewer than 2^32 chunks or
        // nodes.
        let id = self.nodes.len() as u32;
        let mut node = Node::new(
            hash,
            chunk_index as u32,
            start as u32,
            component.len() as u32,
        );
        let nodes = &mut self.nodes;
        let parent_node = &mut nodes[parent as usize];
        parent_node.n_children += 1;
        if parent_node.n_children <= FEW {
            node.next = parent_node.children;
            parent_node.children = id;
            nodes.push(node);
            return id;
        }
        if parent_node.n_children == FEW + 1 {
            // The list outgrew itself: its nodes move to a table of their own.
            let mut table = HashTable::with_capacity(2 * FEW as usize);
            let mut child = parent_node.children;
            parent_node.children = self.tables.len() as u32;
            while child != NONE {
                let listed = &nodes[child as usize];
                table.insert_unique(listed.hash, child, |&node| nodes[node as usize].hash);
                child = listed.next;
            }
            self.tables.push(table);
        }
        let table = &mut self.tables[nodes[parent as usize].children as usize];
        nodes.push(node);
        let nodes = &self.nodes;
        table.insert_unique(hash, id, |&node| nodes[node as usize].hash);
        id
    }
}

fn hash(component: &str) -> u64 {
    FxBuildHasher.hash_one(component)
}

/// Appends `name` lower-cased to `buf` (Python's `str.lower`, as TensorFlow compares names).
fn lower_into(buf: &mut String, name: &str) {
    if name.is_ascii() {
        let start = buf.len();
        buf.push_str(name);
        buf[start..].make_ascii_lowercase();
    } else {
        buf.push_str(&name.to_lowercase());
    }
}

/// `component` as `<base>_<i>`, the form of a name made by suffixing: `i` in decimal without
/// leading zeros, at least 1.
fn split_suffix(component: &str) -> Option<(&str, u32)> {
    if !component.as_bytes().last().is_some_and(u8::is_ascii_digit) {
        return None;
    }
    let underscore = component.rfind('_')?;
    let digits = &component[underscore + 1..];
    if digits.starts_with('0') || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    let i = digits.parse().ok()?;
    Some((&component[..underscore], i))
}

/// The concatenation of `parts` and `_<i>`.
fn suffixed(parts: &[&str], i: u32) -> String {
    let len: usize = parts.iter().map(|part| part.len()).sum();
    let mut name = String::with_capacity(len + 11);
    for part in parts {
        name.push_str(part);
    }
    push_suffix(&mut name, i);
    name
}

/// Appends `_<i>`.
fn push_suffix(buf: &mut String, i: u32) {
    let mut digits = [0u8; 10];
    let mut start = digits.len();
    let mut rest = i;
    loop {
        start -= 1;
        digits[start] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    buf.push('_');
    buf.push_str(std::str::from_utf8(&digits[start..]).expect("digits are ASCII"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes_follow_tensorflow() {
        let mut names = UniqueNames::new();
        assert_eq!(names.unique("Const"), "Const");
        assert_eq!(names.unique("Const"), "Const_1");
        assert_eq!(names.unique("const"), "const_2");
        assert_eq!(names.unique("Identity_1"), "Identity_1");
        assert_eq!(names.unique("Identity"), "Identity");
        // `identity_1` is taken, so the second `Identity` skips to `_2`.
        assert_eq!(names.unique("Identity"), "Identity_2");
        assert_eq!(names.unique("Identity"), "Identity_3");
    }

    /// TensorFlow's `Graph.unique_name(name, mark_as_used=True)` over a flat table of
    /// lower-cased names, as `framework/ops.py` writes it: the model the tree must agree with.
    #[derive(Default)]
    struct Flat(std::collections::HashMap<String, u32>);

    impl Flat {
        fn unique(&mut self, name: &str) -> String {
            let mut key = name.to_lowercase();
            let mut i = self.0.get(&key).copied().unwrap_or(0);
            self.0.insert(key.clone(), i + 1);
            if i == 0 {
                return name.to_owned();
            }
            let base = key.clone();
            while self.0.contains_key(&key) {
                key = format!("{base}_{i}");
                i += 1;
            }
            self.0.insert(key, 1);
            format!("{name}_{}", i - 1)
        }

        fn mark(&mut self, name: &str) {
            *self.0.entry(name.to_lowercase()).or_default() += 1;
        }
    }

    /// One call of a random sequence: `unique`, `unique_in`, `mark`, or a [`Scope`] call (on
    /// one of the scopes handed out so far, by position modulo their number).
    #[derive(Clone, Debug)]
    enum Call {
        Unique(String),
        UniqueIn(String, String),
        Mark(String),
        Scope(String),
        ScopeUnder(usize, String),
        UniqueUnder(usize, String),
    }

    /// Names made of a few components from a small alphabet, so that sequences reuse names,
    /// scopes, case variants, suffix-like components (`a_1`, and `a_0`, `a_01` that suffixing
    /// never makes), empty components and non-ASCII.
    fn name() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let component = prop_oneof![
            Just("a".to_owned()),
            Just("A".to_owned()),
            Just("b".to_owned()),
            Just("a_1".to_owned()),
            Just("A_2".to_owned()),
            Just("a_3".to_owned()),
            Just("a_1_1".to_owned()),
            Just("a_0".to_owned()),
            Just("a_01".to_owned()),
            Just("_1".to_owned()),
            Just(String::new()),
            Just("Ü".to_owned()),
            Just("ü_1".to_owned()),
        ];
        proptest::collection::vec(component, 1..4).prop_map(|parts| parts.join("/"))
    }

    fn call() -> impl proptest::strategy::Strategy<Value = Call> {
        use proptest::prelude::*;
        prop_oneof![
            4 => name().prop_map(Call::Unique),
            4 => (name(), name()).prop_map(|(scope, name)| Call::UniqueIn(scope, name)),
            1 => name().prop_map(Call::Mark),
            2 => name().prop_map(Call::Scope),
            2 => (0..8usize, name()).prop_map(|(scope, name)| Call::ScopeUnder(scope, name)),
            3 => (0..8usize, name()).prop_map(|(scope, name)| Call::UniqueUnder(scope, name)),
        ]
    }

    proptest::proptest! {
        // XorShift: proptest's default (ChaCha) spent 11 of this test's 11.5 s drawing inputs.
        #![proptest_config(proptest::prelude::ProptestConfig {
            rng_algorithm: proptest::test_runner::RngAlgorithm::XorShift,
            ..proptest::prelude::ProptestConfig::with_cases(512)
        })]

        /// Every call gives the name TensorFlow's flat table gives, whatever came before,
        /// looked up from the root or from a scope handed out earlier.
        #[test]
        fn the_tree_agrees_with_tensorflows_flat_table(
            calls in proptest::collection::vec(call(), 1..200),
        ) {
            let (mut tree, mut flat) = (UniqueNames::new(), Flat::default());
            let mut scopes: Vec<Scope> = Vec::new();
            for call in &calls {
                match call {
                    Call::Unique(name) => {
                        proptest::prop_assert_eq!(tree.unique(name), flat.unique(name));
                    }
                    Call::UniqueIn(scope, name) => {
                        let joined = format!("{scope}/{name}");
                        proptest::prop_assert_eq!(tree.unique_in(scope, name), flat.unique(&joined));
                    }
                    Call::Mark(name) => {
                        tree.mark(name);
                        flat.mark(name);
                    }
                    Call::Scope(name) => {
                        let scope = tree.scope(name);
                        proptest::prop_assert_eq!(&scope.name, &flat.unique(name));
                        scopes.push(scope);
                    }
                    Call::ScopeUnder(at, name) if !scopes.is_empty() => {
                        let outer = scopes[at % scopes.len()].clone();
                        let joined = format!("{}/{name}", outer.name);
                        let scope = tree.scope_under(&outer, name);
                        proptest::prop_assert_eq!(&scope.name, &flat.unique(&joined));
                        scopes.push(scope);
                    }
                    Call::UniqueUnder(at, name) if !scopes.is_empty() => {
                        let outer = &scopes[at % scopes.len()];
                        let joined = format!("{}/{name}", outer.name);
                        proptest::prop_assert_eq!(tree.unique_under(outer, name), flat.unique(&joined));
                    }
                    Call::ScopeUnder(..) | Call::UniqueUnder(..) => {}
                }
            }
        }
    }

    #[test]
    fn a_scope_with_many_children_keeps_them() {
        // More children than a list holds: they move to a table, and every name, old and
        // new, is still found.
        let mut names = UniqueNames::new();
        for round in 0..3 {
            for i in 0..(3 * FEW) {
                let expected = match round {
                    0 => format!("s/n{i}"),
                    _ => format!("s/n{i}_{round}"),
                };
                assert_eq!(names.unique_in("s", &format!("n{i}")), expected);
            }
        }
        // The scope itself was never used as a name.
        assert_eq!(names.unique("S"), "S");
        assert_eq!(names.unique("s"), "s_1");
    }

    #[test]
    fn scoped_names_are_the_joined_names() {
        let mut names = UniqueNames::new();
        assert_eq!(
            names.unique_in("Read", "ReadVariableOp"),
            "Read/ReadVariableOp"
        );
        assert_eq!(names.unique("read/readvariableop"), "read/readvariableop_1");
        assert_eq!(
            names.unique_in("Read", "ReadVariableOp"),
            "Read/ReadVariableOp_2"
        );
        names.mark("Ünïcode/X");
        assert_eq!(names.unique_in("üNÏcode", "x"), "üNÏcode/x_1");
    }
}
