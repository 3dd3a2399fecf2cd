//! `${NAME}` placeholders in job files and `NAME='value'` lines in setup scripts.
//!
//! pmemvm substitutes the values in Rust, so the file the guest runs (and the copy in the plan
//! and the report) is complete; an unknown placeholder is an error rather than something fio
//! would silently keep. The same syntax is fio's environment substitution, so a job file also
//! runs by hand: `FILENAME=/dev/pmem0 SIZE=896M JOBS=48 IODEPTH=2 RUNTIME=60 fio randread.fio`.

use std::collections::BTreeMap;

use super::ExperimentError;

/// Replaces every `${NAME}` with its value; a name without a value is an error.
pub fn render_template(
    file: &'static str,
    template: &str,
    vars: &BTreeMap<&'static str, String>,
) -> Result<String, ExperimentError> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            // An unterminated "${" is left as it is; fio would do the same.
            out.push_str(&rest[start..]);
            rest = "";
            break;
        };
        let name = &after[..end];
        match vars.get(name) {
            Some(v) => out.push_str(v),
            None => {
                return Err(ExperimentError::UndefinedVariable {
                    file,
                    name: name.to_owned(),
                    defined: vars.keys().copied().collect::<Vec<_>>().join(", "),
                })
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Job files carry a comment header; placeholders in comments are documentation, so only the
/// lines fio reads are rendered. Returns the header untouched and the rest rendered.
pub fn render_job(
    file: &'static str,
    template: &str,
    vars: &BTreeMap<&'static str, String>,
) -> Result<String, ExperimentError> {
    let mut out = String::with_capacity(template.len());
    for line in template.split_inclusive('\n') {
        if line.trim_start().starts_with(';') || line.trim_start().starts_with('#') {
            out.push_str(line);
        } else {
            out.push_str(&render_template(file, line, vars)?);
        }
    }
    Ok(out)
}

/// The setup step of a plan from the setup script `file` (its path and text)
/// with `vars` ([`render_setup`]).
pub(crate) fn setup(
    file: (&'static str, &str),
    vars: &BTreeMap<&'static str, String>,
) -> Result<super::plan::Setup, ExperimentError> {
    Ok(super::plan::Setup {
        template: file.0,
        script: render_setup(file.0, file.1, vars)?,
    })
}

/// Inserts `NAME='value'` lines below the script's leading comment block.
pub fn render_setup(
    file: &'static str,
    template: &str,
    vars: &BTreeMap<&'static str, String>,
) -> Result<String, ExperimentError> {
    let header_end = template
        .split_inclusive('\n')
        .take_while(|l| l.starts_with('#'))
        .map(str::len)
        .sum::<usize>();
    let mut out = String::from(&template[..header_end]);
    out.push_str("# Set by pmemvm:\n");
    for (k, v) in vars {
        out.push_str(&format!("{k}='{}'\n", v.replace('\'', "'\\''")));
    }
    out.push_str(&template[header_end..]);
    // Every upper-case $NAME / ${NAME} the script uses must be one pmemvm sets.
    for name in upper_case_vars(&template[header_end..]) {
        if !vars.contains_key(name.as_str()) {
            return Err(ExperimentError::UndefinedVariable {
                file,
                name,
                defined: vars.keys().copied().collect::<Vec<_>>().join(", "),
            });
        }
    }
    Ok(out)
}

/// `$NAME` references with all-upper-case names in a shell script.
fn upper_case_vars(script: &str) -> Vec<String> {
    let mut names = Vec::new();
    let bytes = script.as_bytes();
    for (i, _) in script.match_indices('$') {
        let start = if bytes.get(i + 1) == Some(&b'{') {
            i + 2
        } else {
            i + 1
        };
        let name: String = bytes[start..]
            .iter()
            .take_while(|b| b.is_ascii_uppercase() || **b == b'_')
            .map(|&b| char::from(b))
            .collect();
        if !name.is_empty() && !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates() {
        let vars: BTreeMap<&'static str, String> = [("A", "1".to_owned())].into();
        assert_eq!(
            render_template("t", "x=${A} y=${A}$ {", &vars).unwrap(),
            "x=1 y=1$ {"
        );
        let e = render_template("t.fio", "x=${B}", &vars).unwrap_err();
        assert_eq!(
            e.to_string(),
            "t.fio uses ${B}, which pmemvm does not define (defined: A)"
        );
        // Comments keep their placeholders; job lines must have values.
        assert_eq!(
            render_job("t.fio", "; ${B} doc\nx=${A}\n", &vars).unwrap(),
            "; ${B} doc\nx=1\n"
        );
        assert!(render_job("t.fio", "; doc\nx=${B}\n", &vars).is_err());
        let s = render_setup(
            "s.sh",
            "#!/bin/sh\n# c\nset -eu\necho \"$A\" $lower\n",
            &vars,
        )
        .unwrap();
        assert_eq!(
            s,
            "#!/bin/sh\n# c\n# Set by pmemvm:\nA='1'\nset -eu\necho \"$A\" $lower\n"
        );
        assert!(render_setup("s.sh", "#!/bin/sh\necho $NOPE\n", &vars).is_err());
        assert!(render_setup("s.sh", "#!/bin/sh\necho ${NOPE}\n", &vars).is_err());
    }
}
