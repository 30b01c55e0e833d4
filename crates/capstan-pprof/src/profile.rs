//! The pprof profile format (`perftools.profiles.Profile`, google/pprof's `profile.proto`),
//! the messages `go tool pprof` reads, and a [`Builder`] that interns strings, functions and
//! locations while samples are added, then writes the profile gzip-compressed as Go's runtime
//! does.

use std::collections::HashMap;
use std::io::Write as _;
use std::time::{Duration, SystemTime};

use flate2::Compression;
use flate2::write::GzEncoder;
use prost::Message as _;

/// `Profile`: the fields Capstan writes (tags as in `profile.proto`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Profile {
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    #[prost(int64, tag = "12")]
    pub period: i64,
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

/// `ValueType`: a sample value's type and unit, as string-table indexes.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ValueType {
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

/// `Sample`: a stack (leaf first) and one value per sample type.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
}

/// `Mapping`: the executable's address range; its flags tell pprof that the locations are
/// already symbolized.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Mapping {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    #[prost(int64, tag = "5")]
    pub filename: i64,
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
    #[prost(bool, tag = "8")]
    pub has_filenames: bool,
    #[prost(bool, tag = "9")]
    pub has_line_numbers: bool,
    #[prost(bool, tag = "10")]
    pub has_inline_frames: bool,
}

/// `Location`: one frame (an instruction address), with the functions inlined at it, innermost
/// first.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Location {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    #[prost(uint64, tag = "3")]
    pub address: u64,
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
}

/// `Line`: a function and a line in it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Line {
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    #[prost(int64, tag = "2")]
    pub line: i64,
}

/// `Function`: names and source file, as string-table indexes.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Function {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(int64, tag = "2")]
    pub name: i64,
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    #[prost(int64, tag = "4")]
    pub filename: i64,
    #[prost(int64, tag = "5")]
    pub start_line: i64,
}

/// One function in one frame: what symbolization found at an address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Symbol {
    /// The demangled name (`capstan_store::Store::get`).
    pub name: String,
    /// The symbol as the binary spells it (mangled).
    pub system_name: String,
    /// The source file, when the binary has line tables.
    pub file: String,
    /// The line, 0 when unknown.
    pub line: u32,
}

/// Builds one profile: strings, functions and locations are interned as samples come.
#[derive(Debug)]
pub struct Builder {
    profile: Profile,
    strings: HashMap<String, i64>,
    functions: HashMap<(String, String, String), u64>,
    locations: HashMap<LocationKey, u64>,
    samples: HashMap<Vec<u64>, usize>,
}

/// What makes two frames one location: the address where there is one, else the symbols.
#[derive(Debug, PartialEq, Eq, Hash)]
pub enum LocationKey {
    Address(u64),
    Symbols(Vec<Symbol>),
}

impl Builder {
    /// A profile of `sample_types` (type, unit) sampled every `period` of `period_type`.
    pub fn new(sample_types: &[(&str, &str)], period_type: (&str, &str), period: i64) -> Self {
        let mut builder = Builder {
            profile: Profile {
                string_table: vec![String::new()],
                ..Profile::default()
            },
            strings: HashMap::from([(String::new(), 0)]),
            functions: HashMap::new(),
            locations: HashMap::new(),
            samples: HashMap::new(),
        };
        let types = sample_types
            .iter()
            .map(|&(kind, unit)| builder.value_type(kind, unit))
            .collect();
        builder.profile.sample_type = types;
        builder.profile.period_type = Some(builder.value_type(period_type.0, period_type.1));
        builder.profile.period = period;
        let exe = std::env::current_exe()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        let filename = builder.string(&exe);
        builder.profile.mapping.push(Mapping {
            id: 1,
            memory_start: 0,
            memory_limit: u64::MAX,
            filename,
            has_functions: true,
            has_filenames: true,
            has_line_numbers: true,
            has_inline_frames: true,
            ..Mapping::default()
        });
        builder
    }

    /// Which sample type `go tool pprof` shows unless told otherwise.
    pub fn default_sample_type(&mut self, kind: &str) {
        self.profile.default_sample_type = self.string(kind);
    }

    fn value_type(&mut self, kind: &str, unit: &str) -> ValueType {
        ValueType {
            r#type: self.string(kind),
            unit: self.string(unit),
        }
    }

    fn string(&mut self, s: &str) -> i64 {
        if let Some(&index) = self.strings.get(s) {
            return index;
        }
        let index = self.profile.string_table.len() as i64;
        self.profile.string_table.push(s.to_owned());
        self.strings.insert(s.to_owned(), index);
        index
    }

    fn function(&mut self, symbol: &Symbol) -> u64 {
        let key = (
            symbol.name.clone(),
            symbol.system_name.clone(),
            symbol.file.clone(),
        );
        if let Some(&id) = self.functions.get(&key) {
            return id;
        }
        let id = self.profile.function.len() as u64 + 1;
        let function = Function {
            id,
            name: self.string(&symbol.name),
            system_name: self.string(&symbol.system_name),
            filename: self.string(&symbol.file),
            start_line: 0,
        };
        self.profile.function.push(function);
        self.functions.insert(key, id);
        id
    }

    /// The location of a frame at `address` (0 when unknown) whose symbols, innermost first,
    /// are `symbols`.
    pub fn location(&mut self, address: u64, symbols: &[Symbol]) -> u64 {
        let key = if address != 0 {
            LocationKey::Address(address)
        } else {
            LocationKey::Symbols(symbols.to_vec())
        };
        if let Some(&id) = self.locations.get(&key) {
            return id;
        }
        let line = symbols
            .iter()
            .map(|symbol| Line {
                function_id: self.function(symbol),
                line: i64::from(symbol.line),
            })
            .collect();
        let id = self.profile.location.len() as u64 + 1;
        self.profile.location.push(Location {
            id,
            mapping_id: 1,
            address,
            line,
        });
        self.locations.insert(key, id);
        id
    }

    /// Adds `values` to the sample of the stack `locations` (leaf first).
    pub fn sample(&mut self, locations: Vec<u64>, values: &[i64]) {
        if let Some(&index) = self.samples.get(&locations) {
            let sample = &mut self.profile.sample[index];
            for (sum, value) in sample.value.iter_mut().zip(values) {
                *sum += value;
            }
            return;
        }
        self.samples
            .insert(locations.clone(), self.profile.sample.len());
        self.profile.sample.push(Sample {
            location_id: locations,
            value: values.to_vec(),
        });
    }

    /// The profile, taken at `time` over `duration`.
    pub fn finish(mut self, time: SystemTime, duration: Duration) -> Profile {
        self.profile.time_nanos = time
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
        self.profile.duration_nanos = i64::try_from(duration.as_nanos()).unwrap_or(i64::MAX);
        self.profile
    }
}

impl Profile {
    /// The profile as `/debug/pprof/` sends it: protobuf, gzip-compressed.
    pub fn to_gzip(&self) -> Vec<u8> {
        let mut gz = GzEncoder::new(Vec::new(), Compression::default());
        // Writing into a Vec cannot fail.
        let _ = gz.write_all(&self.encode_to_vec());
        gz.finish().unwrap_or_default()
    }

    /// Decodes a profile as [`Profile::to_gzip`] writes it (for tests and tools).
    pub fn from_gzip(bytes: &[u8]) -> Result<Profile, std::io::Error> {
        let mut raw = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(bytes), &mut raw)?;
        Profile::decode(raw.as_slice())
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
    }

    /// A string of the string table.
    pub fn text(&self, index: i64) -> &str {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.string_table.get(i))
            .map_or("", String::as_str)
    }

    /// The names of the functions of a sample's stack, leaf first (inlined ones included).
    pub fn stack(&self, sample: &Sample) -> Vec<&str> {
        let mut names = Vec::new();
        for id in &sample.location_id {
            let Some(location) = self.location.iter().find(|l| l.id == *id) else {
                continue;
            };
            for line in &location.line {
                if let Some(function) = self.function.iter().find(|f| f.id == line.function_id) {
                    names.push(self.text(function.name));
                }
            }
        }
        names
    }

    /// The index of the sample type named `kind`.
    pub fn sample_index(&self, kind: &str) -> Option<usize> {
        self.sample_type
            .iter()
            .position(|t| self.text(t.r#type) == kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn symbol(name: &str, line: u32) -> Symbol {
        Symbol {
            name: name.into(),
            system_name: format!("_ZN{name}"),
            file: "src/lib.rs".into(),
            line,
        }
    }

    #[test]
    fn builds_and_reads_back() {
        let mut builder = Builder::new(
            &[("samples", "count"), ("cpu", "nanoseconds")],
            ("cpu", "nanoseconds"),
            10_000_000,
        );
        let leaf = builder.location(0x1000, &[symbol("inner", 3), symbol("outer", 9)]);
        let root = builder.location(0x2000, &[symbol("main", 1)]);
        assert_eq!(builder.location(0x1000, &[]), leaf, "interned by address");
        builder.sample(vec![leaf, root], &[1, 10_000_000]);
        builder.sample(vec![leaf, root], &[2, 20_000_000]);
        builder.sample(vec![root], &[1, 10_000_000]);
        let profile = builder.finish(SystemTime::now(), Duration::from_secs(1));

        let read = Profile::from_gzip(&profile.to_gzip()).expect("decodes");
        assert_eq!(read, profile);
        assert_eq!(read.sample.len(), 2, "equal stacks are one sample");
        assert_eq!(read.sample[0].value, [3, 30_000_000]);
        assert_eq!(read.stack(&read.sample[0]), ["inner", "outer", "main"]);
        assert_eq!(read.sample_index("cpu"), Some(1));
        assert_eq!(
            read.string_table[0], "",
            "pprof requires the empty string first"
        );
        assert_eq!(
            read.text(read.period_type.as_ref().map_or(0, |t| t.unit)),
            "nanoseconds"
        );
        assert_eq!(read.function.len(), 3);
    }
}
