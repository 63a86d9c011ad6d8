use std::fs;

use super::*;

fn reloading_text(path: &Path) -> Arc<Reloading<String>> {
    let p = path.to_path_buf();
    Reloading::new(vec![p.clone()], move || {
        let text = fs::read_to_string(&p).map_err(|e| e.to_string())?;
        if text.contains("broken") {
            return Err("broken".into());
        }
        Ok(text)
    })
    .unwrap()
}

#[test]
fn a_changed_file_is_reloaded_and_a_broken_one_keeps_the_previous() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cert.pem");
    fs::write(&path, "one").unwrap();
    let r = reloading_text(&path);
    assert_eq!(*r.current(), "one");
    assert_eq!(r.check(), Reload::Unchanged);

    fs::write(&path, "two-longer").unwrap();
    assert_eq!(r.check(), Reload::Reloaded);
    assert_eq!(*r.current(), "two-longer");
    assert_eq!(r.check(), Reload::Unchanged);

    fs::write(&path, "broken").unwrap();
    assert_eq!(r.check(), Reload::Failed("broken".into()));
    assert_eq!(
        *r.current(),
        "two-longer",
        "a file that does not load changes nothing"
    );
    assert_eq!(
        r.check(),
        Reload::Unchanged,
        "a failure is reported once per change"
    );

    fs::remove_file(&path).unwrap();
    assert!(matches!(r.check(), Reload::Failed(_)));
    assert_eq!(*r.current(), "two-longer");
    fs::write(&path, "three-longest").unwrap();
    assert_eq!(r.check(), Reload::Reloaded);
    assert_eq!(*r.current(), "three-longest");
}

#[test]
fn a_first_load_that_fails_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.pem");
    assert!(server_config(&missing, None, ClientAuth::None).is_err());
    let p = missing.clone();
    let r = Reloading::new(vec![p.clone()], move || {
        fs::read_to_string(&p).map_err(|e| e.to_string())
    });
    assert!(r.is_err());
}
