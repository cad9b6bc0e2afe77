//! Generates the Rust types of `schemas/*.json` (Kafka's message-spec format) into
//! `$OUT_DIR/messages.rs`, so that a schema change is a one-file change.
//!
//! Supported: types `bool int8 int16 uint16 int32 int64 float64 string bytes uuid`, arrays of
//! those and of nested structs, `versions`, `nullableVersions`, `taggedVersions`/`tag`, `default`,
//! `ignorable`, and message-level `flexibleVersions`. Anything else (common structs, `records`,
//! field-level flexible versions) stops the build with a clear message instead of being guessed.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::{env, fs};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Spec {
    api_key: Option<i16>,
    #[serde(rename = "type")]
    kind: String,
    name: String,
    valid_versions: String,
    flexible_versions: String,
    #[serde(default)]
    listeners: Vec<String>,
    fields: Vec<FieldSpec>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FieldSpec {
    name: String,
    #[serde(rename = "type")]
    ty: String,
    versions: String,
    nullable_versions: Option<String>,
    tagged_versions: Option<String>,
    tag: Option<i32>,
    default: Option<serde_json::Value>,
    #[serde(default)]
    ignorable: bool,
    #[serde(default)]
    map_key: bool,
    entity_type: Option<String>,
    about: Option<String>,
    fields: Option<Vec<FieldSpec>>,
}

/// An inclusive version range; `lo > hi` is the empty range ("none").
#[derive(Clone, Copy, PartialEq, Eq)]
struct Versions {
    lo: i16,
    hi: i16,
}

impl Versions {
    const NONE: Versions = Versions { lo: 1, hi: 0 };

    fn parse(s: &str) -> Versions {
        let s = s.trim();
        if s == "none" {
            return Versions::NONE;
        }
        if let Some(lo) = s.strip_suffix('+') {
            return Versions {
                lo: num(lo),
                hi: i16::MAX,
            };
        }
        if let Some((lo, hi)) = s.split_once('-') {
            return Versions {
                lo: num(lo),
                hi: num(hi),
            };
        }
        let v = num(s);
        Versions { lo: v, hi: v }
    }

    fn is_empty(self) -> bool {
        self.lo > self.hi
    }

    /// Whether every version of `within` is in `self`.
    fn covers(self, within: Versions) -> bool {
        within.is_empty() || (self.lo <= within.lo && self.hi >= within.hi)
    }

    /// Whether no version of `within` is in `self`.
    fn misses(self, within: Versions) -> bool {
        self.is_empty() || self.hi < within.lo || self.lo > within.hi
    }

    fn intersect(self, other: Versions) -> Versions {
        Versions {
            lo: self.lo.max(other.lo),
            hi: self.hi.min(other.hi),
        }
    }

    /// A boolean Rust expression: `version` is in this range (given it is in `valid`).
    fn test(self, valid: Versions) -> String {
        if self.covers(valid) {
            "true".into()
        } else if self.misses(valid) {
            "false".into()
        } else {
            format!("({}..={}).contains(&version)", self.lo, self.hi)
        }
    }
}

/// `a && b` for generated code, without a constant operand clippy would flag.
fn conj(a: &str, b: &str) -> String {
    match (a, b) {
        ("true", other) | (other, "true") => other.to_string(),
        ("false", _) | (_, "false") => "false".to_string(),
        _ => format!("{a} && {b}"),
    }
}

fn present_everywhere(f: &Field, valid: Versions) -> bool {
    f.versions.covers(valid)
}

fn num(s: &str) -> i16 {
    s.trim()
        .parse()
        .unwrap_or_else(|_| panic!("bad version number {s:?}"))
}

#[derive(Clone, PartialEq)]
enum Ty {
    Bool,
    Int8,
    Int16,
    Uint16,
    Int32,
    Int64,
    Float64,
    Str,
    Bytes,
    Uuid,
    Array(Box<Ty>),
    Struct(String),
}

impl Ty {
    fn parse(s: &str) -> Ty {
        match s {
            "bool" => Ty::Bool,
            "int8" => Ty::Int8,
            "int16" => Ty::Int16,
            "uint16" => Ty::Uint16,
            "int32" => Ty::Int32,
            "int64" => Ty::Int64,
            "float64" => Ty::Float64,
            "string" => Ty::Str,
            "bytes" => Ty::Bytes,
            "uuid" => Ty::Uuid,
            "records" => panic!("type `records` is not supported by this generator"),
            _ => match s.strip_prefix("[]") {
                Some(inner) => Ty::Array(Box::new(Ty::parse(inner))),
                None if s.starts_with(char::is_uppercase) => Ty::Struct(s.to_string()),
                None => panic!("unknown field type {s:?}"),
            },
        }
    }

    fn rust(&self) -> String {
        match self {
            Ty::Bool => "bool".into(),
            Ty::Int8 => "i8".into(),
            Ty::Int16 => "i16".into(),
            Ty::Uint16 => "u16".into(),
            Ty::Int32 => "i32".into(),
            Ty::Int64 => "i64".into(),
            Ty::Float64 => "f64".into(),
            Ty::Str => "::std::string::String".into(),
            Ty::Bytes => "::bytes::Bytes".into(),
            Ty::Uuid => "::uuid::Uuid".into(),
            Ty::Array(inner) => format!("::std::vec::Vec<{}>", inner.rust()),
            Ty::Struct(name) => name.clone(),
        }
    }

    fn fixed(&self) -> Option<&'static str> {
        Some(match self {
            Ty::Int8 => "int8",
            Ty::Int16 => "int16",
            Ty::Uint16 => "uint16",
            Ty::Int32 => "int32",
            Ty::Int64 => "int64",
            Ty::Float64 => "float64",
            _ => return None,
        })
    }
}

struct Field {
    json_name: String,
    rust_name: String,
    ty: Ty,
    versions: Versions,
    nullable: Versions,
    tag: Option<(i32, Versions)>,
    default: Option<serde_json::Value>,
    ignorable: bool,
    about: String,
}

impl Field {
    fn from_spec(f: &FieldSpec) -> Field {
        let _ = (&f.entity_type, f.map_key);
        let nullable = f
            .nullable_versions
            .as_deref()
            .map_or(Versions::NONE, Versions::parse);
        let ty = Ty::parse(&f.ty);
        if !nullable.is_empty() && !matches!(ty, Ty::Str | Ty::Bytes | Ty::Array(_)) {
            panic!(
                "field {}: only strings, bytes and arrays may be nullable here",
                f.name
            );
        }
        let tag = match (f.tag, &f.tagged_versions) {
            (Some(tag), Some(tv)) => Some((tag, Versions::parse(tv))),
            (None, None) => None,
            _ => panic!("field {}: tag and taggedVersions go together", f.name),
        };
        Field {
            json_name: f.name.clone(),
            rust_name: snake(&f.name),
            ty,
            versions: Versions::parse(&f.versions),
            nullable,
            tag,
            default: f.default.clone(),
            ignorable: f.ignorable,
            about: f.about.clone().unwrap_or_default(),
        }
    }

    fn is_nullable(&self) -> bool {
        !self.nullable.is_empty()
    }

    fn rust_type(&self) -> String {
        if self.is_nullable() {
            format!("::std::option::Option<{}>", self.ty.rust())
        } else {
            self.ty.rust()
        }
    }

    /// The versions in which the field is on the wire (as a tagged field, if it is one).
    fn present(&self) -> Versions {
        match self.tag {
            Some((_, tagged)) => self.versions.intersect(tagged),
            None => self.versions,
        }
    }

    fn default_expr(&self) -> String {
        let text = match &self.default {
            None => None,
            Some(serde_json::Value::String(s)) => Some(s.clone()),
            Some(other) => Some(other.to_string()),
        };
        if self.is_nullable() {
            return match text.as_deref() {
                None | Some("null") => "::std::option::Option::None".into(),
                Some(t) => format!(
                    "::std::option::Option::Some({})",
                    self.value_default(Some(t))
                ),
            };
        }
        self.value_default(text.as_deref())
    }

    /// A condition true when `self.<field>` is not the field's default, written as clippy
    /// wants it (a bool as itself, a null default as `is_some()`).
    fn non_default(&self) -> String {
        let place = format!("self.{}", self.rust_name);
        match self.default_expr().as_str() {
            "false" => place,
            "true" => format!("!{place}"),
            "::std::option::Option::None" => format!("{place}.is_some()"),
            default => format!("{place} != {default}"),
        }
    }

    fn value_default(&self, text: Option<&str>) -> String {
        match (&self.ty, text) {
            (Ty::Bool, t) => match t.unwrap_or("false") {
                "true" => "true".into(),
                "false" => "false".into(),
                other => panic!("field {}: bad bool default {other:?}", self.json_name),
            },
            (Ty::Str, None) => "::std::string::String::new()".into(),
            (Ty::Str, Some(t)) => format!("::std::string::String::from({t:?})"),
            (Ty::Float64, t) => {
                let v: f64 = t.unwrap_or("0").parse().expect("float default");
                format!("{v:?}f64")
            }
            (ty, t) if ty.fixed().is_some() => {
                let t = t.unwrap_or("0");
                let v: i64 = match t.strip_prefix("0x") {
                    Some(hex) => i64::from_str_radix(hex, 16).expect("hex default"),
                    None => t.parse().unwrap_or_else(|_| {
                        panic!("field {}: bad integer default {t:?}", self.json_name)
                    }),
                };
                format!("{v}{}", ty.rust())
            }
            (_, Some(t)) if !t.is_empty() => {
                panic!(
                    "field {}: default {t:?} not supported for this type",
                    self.json_name
                )
            }
            (ty, _) => format!("<{} as ::std::default::Default>::default()", ty.rust()),
        }
    }
}

fn snake(name: &str) -> String {
    let chars: Vec<char> = name.chars().collect();
    let mut out = String::new();
    for (i, &c) in chars.iter().enumerate() {
        if c.is_uppercase() {
            let prev_lower =
                i > 0 && (chars[i - 1].is_lowercase() || chars[i - 1].is_ascii_digit());
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_lowercase());
            let prev_upper = i > 0 && chars[i - 1].is_uppercase();
            if i > 0 && (prev_lower || (prev_upper && next_lower)) {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    }
    match out.as_str() {
        "type" | "match" | "struct" | "ref" | "mod" => format!("r#{out}"),
        _ => out,
    }
}

/// Code generation context for one schema file.
struct Gen<'a> {
    spec: &'a Spec,
    valid: Versions,
    flexible: Versions,
    structs: String,
}

impl Gen<'_> {
    fn gen_struct(&mut self, name: &str, specs: &[FieldSpec], top: bool, about: &str) {
        let fields: Vec<Field> = specs.iter().map(Field::from_spec).collect();
        for spec in specs {
            if let Some(children) = &spec.fields {
                let child = match Ty::parse(&spec.ty) {
                    Ty::Struct(n) => n,
                    Ty::Array(inner) => match *inner {
                        Ty::Struct(n) => n,
                        _ => panic!("field {} has sub-fields but is not a struct", spec.name),
                    },
                    _ => panic!("field {} has sub-fields but is not a struct", spec.name),
                };
                self.gen_struct(&child, children, false, spec.about.as_deref().unwrap_or(""));
            }
        }
        let has_tagged_section = !self.flexible.misses(self.valid);
        let mut s = String::new();
        let _ = writeln!(s, "#[doc = {about:?}]");
        let _ = writeln!(
            s,
            "#[derive(Debug, Clone, PartialEq)]\npub struct {name} {{"
        );
        for f in &fields {
            let _ = writeln!(s, "    #[doc = {:?}]", f.about);
            let _ = writeln!(s, "    pub {}: {},", f.rust_name, f.rust_type());
        }
        if has_tagged_section {
            s.push_str(
                "    /// Tagged fields this version does not know, kept so they survive a decode and encode.\n",
            );
            s.push_str("    pub unknown_tagged_fields: ::std::collections::BTreeMap<i32, ::bytes::Bytes>,\n");
        }
        s.push_str("}\n\n");

        // Default
        let _ = writeln!(
            s,
            "#[allow(clippy::derivable_impls)]\nimpl ::std::default::Default for {name} {{\n    fn default() -> Self {{\n        Self {{"
        );
        for f in &fields {
            let _ = writeln!(s, "            {}: {},", f.rust_name, f.default_expr());
        }
        if has_tagged_section {
            s.push_str("            unknown_tagged_fields: ::std::collections::BTreeMap::new(),\n");
        }
        s.push_str("        }\n    }\n}\n\n");

        // WireFormat
        let mut write = String::new();
        let mut read = String::new();
        if top {
            let check = format!(
                "        if !({}..={}).contains(&version) {{\n            return Err(CodecError::UnsupportedVersion {{ message: {:?}, version, min: {}, max: {} }});\n        }}\n",
                self.valid.lo, self.valid.hi, self.spec.name, self.valid.lo, self.valid.hi
            );
            write.push_str(&check);
            read.push_str(&check);
        }
        for f in fields.iter().filter(|f| f.tag.is_none()) {
            let present = f.versions.test(self.valid);
            let depth = if present_everywhere(f, self.valid) {
                2
            } else {
                3
            };
            let body = self.write_field(f, &format!("&self.{}", f.rust_name), depth);
            let absent = self.absent_check(f);
            match present.as_str() {
                "true" => write.push_str(&body),
                "false" => write.push_str(&absent.replace("else ", "")),
                _ => {
                    let _ = write!(write, "        if {present} {{\n{body}        }}");
                    if absent.is_empty() {
                        write.push('\n');
                    } else {
                        write.push(' ');
                        write.push_str(absent.trim_start());
                    }
                }
            }
            let expr = self.read_expr(f);
            let value = match present.as_str() {
                "true" => expr,
                "false" => f.default_expr(),
                _ => format!("if {present} {{ {expr} }} else {{ {} }}", f.default_expr()),
            };
            let _ = writeln!(read, "        let {} = {value};", f.rust_name);
        }
        let tagged: Vec<&Field> = fields.iter().filter(|f| f.tag.is_some()).collect();
        if has_tagged_section {
            write.push_str("        if flexible {\n");
            if !tagged.is_empty() {
                write.push_str("            let mut known: ::std::vec::Vec<(i32, ::std::vec::Vec<u8>)> = ::std::vec::Vec::new();\n");
            }
            for f in &tagged {
                let (tag, _) = f.tag.expect("tagged");
                let present = f.present().test(self.valid);
                let body = self.write_field(f, &format!("&self.{}", f.rust_name), 5);
                let non_default = f.non_default();
                let _ = write!(
                    write,
                    "            if {cond} {{\n                let mut buf = ::std::vec::Vec::new();\n                {{\n                    let w = &mut buf;\n{body}                }}\n                known.push(({tag}, buf));\n            }}",
                    cond = conj(&present, &non_default),
                );
                if f.ignorable || present == "true" {
                    write.push('\n');
                } else {
                    let _ = writeln!(
                        write,
                        " else if {c} {{\n                return Err(CodecError::FieldNotInVersion {{ field: {j:?}, version }});\n            }}",
                        c = f.non_default(),
                        j = f.json_name
                    );
                }
            }
            if tagged.is_empty() {
                write.push_str("            let all: ::std::vec::Vec<(i32, &[u8])> = self.unknown_tagged_fields.iter().map(|(t, v)| (*t, &v[..])).collect();\n");
            } else {
                write.push_str("            let mut all: ::std::vec::Vec<(i32, &[u8])> = known.iter().map(|(t, v)| (*t, v.as_slice())).chain(self.unknown_tagged_fields.iter().map(|(t, v)| (*t, &v[..]))).collect();\n            all.sort_by_key(|(t, _)| *t);\n");
            }
            write.push_str("            codec::write_tagged_fields(w, &all)?;\n        }");
            let mut non_default = vec!["!self.unknown_tagged_fields.is_empty()".to_string()];
            for f in tagged.iter().filter(|f| !f.ignorable) {
                non_default.push(f.non_default());
            }
            let _ = writeln!(
                write,
                " else if {} {{\n            return Err(CodecError::FieldNotInVersion {{ field: \"tagged fields\", version }});\n        }}",
                non_default.join(" || ")
            );

            for f in &tagged {
                let _ = writeln!(
                    read,
                    "        let mut {} = {};",
                    f.rust_name,
                    f.default_expr()
                );
            }
            read.push_str("        let mut unknown_tagged_fields = ::std::collections::BTreeMap::new();\n        if flexible {\n            codec::read_tagged_fields(r, |tag, value| {\n");
            if tagged.is_empty() {
                read.push_str("                unknown_tagged_fields.insert(tag, value);\n                Ok(())\n            })?;\n        }\n");
            } else {
                read.push_str("                match tag {\n");
                for f in &tagged {
                    let (tag, _) = f.tag.expect("tagged");
                    let present = f.present().test(self.valid);
                    let guard = if present == "true" {
                        String::new()
                    } else {
                        format!(" if {present}")
                    };
                    let _ = writeln!(
                        read,
                        "                    {tag}{guard} => {{\n                        {n} = codec::read_tagged_value(tag, value, |r| Ok({e}))?;\n                    }}",
                        n = f.rust_name,
                        e = self.read_expr(f)
                    );
                }
                read.push_str("                    _ => {\n                        unknown_tagged_fields.insert(tag, value);\n                    }\n                }\n                Ok(())\n            })?;\n        }\n");
            }
        }
        let mut names: Vec<String> = fields.iter().map(|f| f.rust_name.clone()).collect();
        if has_tagged_section {
            names.push("unknown_tagged_fields".into());
        }
        let _ = writeln!(read, "        Ok(Self {{ {} }})", names.join(", "));

        let flex_test = self.flexible.test(self.valid);
        let prelude = |body: &str| {
            if body.contains("flexible") {
                format!("        let flexible = {flex_test};\n")
            } else {
                String::new()
            }
        };
        let ver = |body: &str| {
            if body.contains("version") {
                "version"
            } else {
                "_version"
            }
        };
        let _ = write!(
            s,
            "impl WireFormat for {name} {{\n    fn write<W: Writer>(&self, w: &mut W, {wv}: i16) -> Result<(), CodecError> {{\n{wp}{write}        Ok(())\n    }}\n\n    fn read(r: &mut ::bytes::Bytes, {rv}: i16) -> Result<Self, CodecError> {{\n{rp}{read}    }}\n}}\n\n",
            wv = ver(&write),
            wp = prelude(&write),
            rv = ver(&read),
            rp = prelude(&read),
        );
        s.push_str(&self.strategy(name, &fields, has_tagged_section));
        self.structs.push_str(&s);
    }

    /// `else if self.f != default { return Err(..) }` for a field absent at some versions.
    fn absent_check(&self, f: &Field) -> String {
        if f.ignorable || f.versions.covers(self.valid) {
            return String::new();
        }
        format!(
            "        else if {c} {{\n            return Err(CodecError::FieldNotInVersion {{ field: {j:?}, version }});\n        }}\n",
            c = f.non_default(),
            j = f.json_name
        )
    }

    fn write_field(&self, f: &Field, place: &str, depth: usize) -> String {
        let pad = "    ".repeat(depth);
        if !f.is_nullable() {
            return self.write_value(&f.ty, place, depth);
        }
        let null = match f.ty {
            Ty::Str => "codec::write_nullable_string(w, None, flexible)?;",
            Ty::Bytes => "codec::write_nullable_bytes(w, None, flexible)?;",
            _ => "codec::write_array_len(w, None, flexible)?;",
        };
        let check = if f.nullable.covers(self.valid) {
            String::new()
        } else {
            format!(
                "{pad}        if !{} {{\n{pad}            return Err(CodecError::NullNotAllowed {{ field: {:?}, version }});\n{pad}        }}\n",
                f.nullable.test(self.valid),
                f.json_name
            )
        };
        format!(
            "{pad}match {place} {{\n{pad}    ::std::option::Option::Some(v) => {{\n{inner}{pad}    }}\n{pad}    ::std::option::Option::None => {{\n{check}{pad}        {null}\n{pad}    }}\n{pad}}}\n",
            inner = self.write_value(&f.ty, "v", depth + 2),
        )
    }

    /// Code writing the value behind the reference expression `r`.
    fn write_value(&self, ty: &Ty, r: &str, depth: usize) -> String {
        let pad = "    ".repeat(depth);
        // `r` is a reference expression: `&self.field` or a bound reference such as `item`.
        let place = r.strip_prefix('&').unwrap_or(r);
        let value = match r.strip_prefix('&') {
            Some(owned) => owned.to_string(),
            None => format!("*{r}"),
        };
        match ty {
            Ty::Bool => format!("{pad}codec::write_bool(w, {value});\n"),
            Ty::Str => format!("{pad}codec::write_string(w, {r}, flexible)?;\n"),
            Ty::Bytes => format!("{pad}codec::write_bytes(w, {r}, flexible)?;\n"),
            Ty::Uuid => format!("{pad}codec::write_uuid(w, {r});\n"),
            Ty::Struct(_) => format!("{pad}{place}.write(w, version)?;\n"),
            Ty::Array(inner) => format!(
                "{pad}codec::write_array_len(w, Some({place}.len()), flexible)?;\n{pad}for item in {place}.iter() {{\n{}{pad}}}\n",
                self.write_value(inner, "item", depth + 1)
            ),
            fixed => format!(
                "{pad}codec::write_{}(w, {value});\n",
                fixed.fixed().expect("fixed-width type")
            ),
        }
    }

    fn read_expr(&self, f: &Field) -> String {
        let field = format!("{:?}", f.json_name);
        if !f.is_nullable() {
            return self.read_value(&f.ty, &field);
        }
        let read = match &f.ty {
            Ty::Str => "codec::read_nullable_string(r, flexible)?".to_string(),
            Ty::Bytes => "codec::read_nullable_bytes(r, flexible)?".to_string(),
            Ty::Array(inner) => format!(
                "codec::read_nullable_array(r, flexible, |r| Ok({}))?",
                self.read_value(inner, &field)
            ),
            _ => unreachable!("checked in Field::from_spec"),
        };
        if f.nullable.covers(self.valid) {
            read
        } else {
            format!(
                "{{ let v = {read}; if v.is_none() && !{} {{ return Err(CodecError::NullNotAllowed {{ field: {field}, version }}); }} v }}",
                f.nullable.test(self.valid)
            )
        }
    }

    fn read_value(&self, ty: &Ty, field: &str) -> String {
        match ty {
            Ty::Bool => "codec::read_bool(r)?".into(),
            Ty::Str => format!("codec::read_string(r, flexible, {field}, version)?"),
            Ty::Bytes => format!("codec::read_bytes(r, flexible, {field}, version)?"),
            Ty::Uuid => "codec::read_uuid(r)?".into(),
            Ty::Struct(name) => format!("<{name} as WireFormat>::read(r, version)?"),
            Ty::Array(inner) => format!(
                "codec::read_array(r, flexible, {field}, version, |r| Ok({}))?",
                self.read_value(inner, field)
            ),
            fixed => format!(
                "codec::read_{}(r)?",
                fixed.fixed().expect("fixed-width type")
            ),
        }
    }

    /// A proptest strategy producing values that are valid at a given version.
    fn strategy(&self, name: &str, fields: &[Field], has_tagged_section: bool) -> String {
        let mut parts: Vec<(String, String)> = Vec::new();
        for f in fields {
            let present = f.present().test(self.valid);
            let mut value = self.value_strategy(&f.ty);
            if f.is_nullable() {
                let nullable = f.nullable.test(self.valid);
                value = format!(
                    "if {nullable} {{ ::proptest::option::of({value}).boxed() }} else {{ ({value}).prop_map(Some).boxed() }}"
                );
            }
            let present = if f.tag.is_some() {
                conj("flexible", &present)
            } else {
                present
            };
            parts.push((
                f.rust_name.clone(),
                format!(
                    "if {present} {{ ({value}).boxed() }} else {{ Just({}).boxed() }}",
                    f.default_expr()
                ),
            ));
        }
        if has_tagged_section {
            parts.push((
                "unknown_tagged_fields".into(),
                "if flexible { ::proptest::collection::btree_map(1000i32..1004, ::proptest::collection::vec(any::<u8>(), 0..8).prop_map(::bytes::Bytes::from), 0..2).boxed() } else { Just(::std::collections::BTreeMap::new()).boxed() }".into(),
            ));
        }
        let body = if parts.is_empty() {
            "Just(Self::default()).boxed()".to_string()
        } else {
            let mut strat = parts.last().map(|p| p.1.clone()).unwrap_or_default();
            let mut pat = parts.last().map(|p| p.0.clone()).unwrap_or_default();
            for (n, st) in parts.iter().rev().skip(1) {
                strat = format!("({st}, {strat})");
                pat = format!("({n}, {pat})");
            }
            let names: Vec<&str> = parts.iter().map(|p| p.0.as_str()).collect();
            // Several parts already form a tuple; a single part is an `if` that needs parentheses.
            let strat = if parts.len() == 1 {
                format!("({strat})")
            } else {
                strat
            };
            format!(
                "{strat}.prop_map(|{pat}| Self {{ {} }}).boxed()",
                names.join(", ")
            )
        };
        let flex = if body.contains("flexible") {
            format!(
                "        let flexible = {};\n",
                self.flexible.test(self.valid)
            )
        } else {
            String::new()
        };
        let ver = if body.contains("version") {
            "version"
        } else {
            "_version"
        };
        format!(
            "#[cfg(any(test, feature = \"test-util\"))]\nimpl {name} {{\n    /// A proptest strategy for values that are valid at `version`.\n    pub fn arbitrary({ver}: i16) -> ::proptest::strategy::BoxedStrategy<Self> {{\n        use ::proptest::prelude::*;\n{flex}        {body}\n    }}\n}}\n\n"
        )
    }

    fn value_strategy(&self, ty: &Ty) -> String {
        match ty {
            Ty::Bool => "any::<bool>()".into(),
            Ty::Int8 => "any::<i8>()".into(),
            Ty::Int16 => "any::<i16>()".into(),
            Ty::Uint16 => "any::<u16>()".into(),
            Ty::Int32 => "any::<i32>()".into(),
            Ty::Int64 => "any::<i64>()".into(),
            Ty::Float64 => "(-1.0e12f64..1.0e12f64)".into(),
            Ty::Str => "\"\\\\PC{0,12}\"".into(),
            Ty::Bytes => {
                "::proptest::collection::vec(any::<u8>(), 0..16).prop_map(::bytes::Bytes::from)"
                    .into()
            }
            Ty::Uuid => "any::<u128>().prop_map(::uuid::Uuid::from_u128)".into(),
            Ty::Struct(n) => format!("{n}::arbitrary(version)"),
            Ty::Array(inner) => {
                format!(
                    "::proptest::collection::vec({}, 0..4)",
                    self.value_strategy(inner)
                )
            }
        }
    }
}

fn main() {
    let dir = Path::new("schemas");
    println!("cargo::rerun-if-changed=schemas");
    let mut paths: Vec<_> = fs::read_dir(dir)
        .expect("protocol/schemas exists")
        .map(|e| e.expect("readable schema directory").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    paths.sort();

    let mut specs = Vec::new();
    for path in &paths {
        println!("cargo::rerun-if-changed={}", path.display());
        let text = fs::read_to_string(path).expect("readable schema");
        let spec: Spec = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{}: not a valid message spec: {e}", path.display()));
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default();
        assert_eq!(
            stem,
            spec.name,
            "{}: file name must equal the message name",
            path.display()
        );
        specs.push(spec);
    }

    let mut out = String::from(
        "// Generated by protocol/build.rs from protocol/schemas/*.json. Do not edit.\n\n",
    );
    let mut apis: BTreeMap<i16, (Option<&Spec>, Option<&Spec>)> = BTreeMap::new();
    let mut all_types = Vec::new();
    for spec in &specs {
        let module = snake(&spec.name);
        let valid = Versions::parse(&spec.valid_versions);
        let flexible = Versions::parse(&spec.flexible_versions);
        let mut generator = Gen {
            spec,
            valid,
            flexible,
            structs: String::new(),
        };
        let about = format!(
            "{} ({}, versions {}).",
            spec.name, spec.kind, spec.valid_versions
        );
        generator.gen_struct(&spec.name, &spec.fields, true, &about);
        let _ = writeln!(
            out,
            "#[doc = {:?}]\npub mod {module} {{\n    #![allow(unused_imports, clippy::needless_question_mark)]\n    use crate::codec::{{self, CodecError, WireFormat, Writer}};\n\n{}",
            format!("The `{}` schema ({}).", spec.name, spec.kind),
            generator.structs
        );
        let _ = writeln!(
            out,
            "impl {n} {{\n    /// The message name in the schema.\n    pub const NAME: &'static str = {n:?};\n    /// The lowest version defined.\n    pub const MIN_VERSION: i16 = {lo};\n    /// The highest version defined.\n    pub const MAX_VERSION: i16 = {hi};\n    /// Whether `version` uses the flexible encoding (compact fields and tagged fields).\n    pub fn is_flexible(version: i16) -> bool {{\n        {flex}\n    }}\n}}\n",
            n = spec.name,
            lo = valid.lo,
            hi = valid.hi,
            flex = if flexible.is_empty() {
                "let _ = version;\n        false".to_string()
            } else {
                format!("({}..={}).contains(&version)", flexible.lo, flexible.hi)
            }
        );
        match spec.kind.as_str() {
            "request" | "response" => {
                let key = spec.api_key.expect("requests and responses have an apiKey");
                let request = spec.kind == "request";
                let entry = apis.entry(key).or_default();
                if request {
                    entry.0 = Some(spec);
                } else {
                    entry.1 = Some(spec);
                }
                let header = if request { (2, 1) } else { (1, 0) };
                let _ = writeln!(
                    out,
                    "impl {n} {{\n    /// The API key.\n    pub const API_KEY: i16 = {key};\n}}\n\nimpl ::kafka_protocol::protocol::Message for {n} {{\n    const VERSIONS: ::kafka_protocol::protocol::VersionRange = ::kafka_protocol::protocol::VersionRange {{ min: {lo}, max: {hi} }};\n    const DEPRECATED_VERSIONS: Option<::kafka_protocol::protocol::VersionRange> = None;\n}}\n\nimpl ::kafka_protocol::protocol::Encodable for {n} {{\n    fn encode<B: ::kafka_protocol::protocol::buf::ByteBufMut>(&self, buf: &mut B, version: i16) -> ::anyhow::Result<()> {{\n        Ok(WireFormat::write(self, &mut codec::BufWriter(buf), version)?)\n    }}\n\n    fn compute_size(&self, version: i16) -> ::anyhow::Result<usize> {{\n        Ok(self.encoded_size(version)?)\n    }}\n}}\n\nimpl ::kafka_protocol::protocol::Decodable for {n} {{\n    fn decode<B: ::kafka_protocol::protocol::buf::ByteBuf>(buf: &mut B, version: i16) -> ::anyhow::Result<Self> {{\n        let all = buf.peek_bytes(0..::bytes::Buf::remaining(buf));\n        let mut rest = all.clone();\n        let value = <Self as WireFormat>::read(&mut rest, version)?;\n        ::bytes::Buf::advance(buf, all.len() - rest.len());\n        Ok(value)\n    }}\n}}\n\nimpl ::kafka_protocol::protocol::HeaderVersion for {n} {{\n    fn header_version(version: i16) -> i16 {{\n        if Self::is_flexible(version) {{ {} }} else {{ {} }}\n    }}\n}}\n",
                    header.0,
                    header.1,
                    n = spec.name,
                    lo = valid.lo,
                    hi = valid.hi,
                );
                if request {
                    let response = spec.name.replace("Request", "Response");
                    let _ = writeln!(
                        out,
                        "impl ::kafka_protocol::protocol::Request for {n} {{\n    const KEY: i16 = {key};\n    type Response = super::{module}::{response};\n}}\n",
                        n = spec.name,
                        module = snake(&response),
                    );
                }
            }
            "coordinator-key" | "coordinator-value" => {
                let key = spec.api_key.expect("coordinator records have an apiKey");
                let _ = writeln!(
                    out,
                    "impl {n} {{\n    /// The coordinator record type this {k} belongs to.\n    pub const RECORD_TYPE: i16 = {key};\n}}\n",
                    n = spec.name,
                    k = if spec.kind == "coordinator-key" {
                        "key"
                    } else {
                        "value"
                    },
                );
            }
            "data" => {}
            other => panic!("{}: unsupported spec type {other:?}", spec.name),
        }
        out.push_str("}\n");
        let _ = writeln!(out, "pub use {module}::{};\n", spec.name);
        all_types.push(spec.name.clone());
        let _ = &spec.listeners;
    }

    // The request/response pairs as Kafka API keys.
    let mut variants = String::new();
    let mut arms_from = String::new();
    let mut arms_name = String::new();
    let mut arms_max = String::new();
    let mut arms_flex = String::new();
    let mut all = Vec::new();
    for (key, (req, resp)) in &apis {
        let req = req.unwrap_or_else(|| panic!("api key {key} has no request schema"));
        let resp = resp.unwrap_or_else(|| panic!("api key {key} has no response schema"));
        assert_eq!(
            req.valid_versions, resp.valid_versions,
            "{}: request and response versions differ",
            req.name
        );
        let base = req
            .name
            .strip_suffix("Request")
            .expect("request names end in Request");
        let valid = Versions::parse(&req.valid_versions);
        let _ = writeln!(
            variants,
            "    /// `{}` / `{}`.\n    {base} = {key},",
            req.name, resp.name
        );
        let _ = writeln!(arms_from, "            {key} => Some(Self::{base}),");
        let _ = writeln!(arms_name, "            Self::{base} => {base:?},");
        let _ = writeln!(
            arms_max,
            "            Self::{base} => ({}, {}),",
            valid.lo, valid.hi
        );
        let _ = writeln!(
            arms_flex,
            "            Self::{base} => {}::is_flexible(version),",
            req.name
        );
        all.push(format!("Self::{base}"));
    }
    let _ = writeln!(
        out,
        "/// The KIP-1279 API keys this crate defines (ours until upstream assigns final numbers).\n#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]\n#[repr(i16)]\npub enum MirrorApiKey {{\n{variants}}}\n\nimpl MirrorApiKey {{\n    /// Every KIP-1279 API, by key.\n    pub const ALL: [MirrorApiKey; {n}] = [{all}];\n\n    /// The API with this key, if it is one of ours.\n    pub fn from_i16(key: i16) -> Option<Self> {{\n        match key {{\n{arms_from}            _ => None,\n        }}\n    }}\n\n    /// The API key.\n    pub fn key(self) -> i16 {{\n        self as i16\n    }}\n\n    /// The API's name, as Kafka spells it.\n    pub fn name(self) -> &'static str {{\n        match self {{\n{arms_name}        }}\n    }}\n\n    /// The lowest and highest version defined.\n    pub fn versions(self) -> (i16, i16) {{\n        match self {{\n{arms_max}        }}\n    }}\n\n    /// Whether `version` is flexible (request header v2, response header v1).\n    pub fn is_flexible(self, version: i16) -> bool {{\n        match self {{\n{arms_flex}        }}\n    }}\n}}\n",
        n = all.len(),
        all = all.join(", "),
    );

    let mut each = String::new();
    let mut arms = String::new();
    for t in &all_types {
        let _ = writeln!(each, "        $m!({t});");
        let _ = writeln!(
            arms,
            "        {t:?} => {t}::from_bytes(bytes, version).and_then(|v| v.to_bytes(version)),"
        );
    }
    let _ = writeln!(
        out,
        "/// Calls `$m!(Type)` for every generated top-level type, for tests that cover them all.\n#[cfg(test)]\nmacro_rules! for_each_message {{\n    ($m:ident) => {{\n{each}    }};\n}}\n"
    );
    let _ = writeln!(
        out,
        "/// The name of every generated top-level type.\npub const ALL_TYPES: [&str; {n}] = {all_types:?};\n\n/// Decodes `bytes` as the type named `name` (one of [`ALL_TYPES`]) at `version` and encodes the\n/// result again; `None` for an unknown name. Lets fuzzers and tools reach every decoder.\npub fn decode_and_reencode(name: &str, bytes: ::bytes::Bytes, version: i16) -> Option<Result<::bytes::Bytes, CodecError>> {{\n    use crate::codec::WireFormat;\n    Some(match name {{\n{arms}        _ => return None,\n    }})\n}}",
        n = all_types.len(),
    );

    let dest = Path::new(&env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("messages.rs");
    fs::write(dest, out).expect("writable OUT_DIR");
}
