//! The generated CRDs (`worksession crd`, `crds/`): every kind's schema as the API server takes it.

use super::{WORK_SESSION_NAME_RULE, WorkBudget, WorkEvent, WorkSession};

/// The `format`s the API server knows in a CRD schema; any other is dropped from the generated CRDs (the API server
/// would warn `unrecognized format` on every apply). The bounds beside them (`minimum: 0` for unsigned integers)
/// keep their meaning.
pub const KNOWN_FORMATS: &[&str] = &[
    "int32",
    "int64",
    "float",
    "double",
    "byte",
    "binary",
    "date",
    "date-time",
    "duration",
    "password",
    "uuid",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
];

/// The CRDs of this API, in the order `worksession crd` prints them.
pub fn crds() -> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> {
    use kube::CustomResourceExt;
    fn drop_unknown_formats(node: &mut serde_json::Value) {
        match node {
            serde_json::Value::Object(map) => {
                if map.get("format").and_then(|f| f.as_str()).is_some_and(|f| !KNOWN_FORMATS.contains(&f)) {
                    map.remove("format");
                }
                map.values_mut().for_each(drop_unknown_formats);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(drop_unknown_formats),
            _ => {}
        }
    }
    let mut session = serde_json::to_value(WorkSession::crd()).expect("a CRD serializes");
    // The API server checks a custom resource's name as a DNS subdomain; a WorkSession's must be a label.
    session["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"] = serde_json::json!([
        {"rule": WORK_SESSION_NAME_RULE, "message": "metadata.name must be a DNS label (at most 63 characters)"}
    ]);
    let (event, budget) = (WorkEvent::crd(), WorkBudget::crd());
    [
        session,
        serde_json::to_value(event).expect("a CRD serializes"),
        serde_json::to_value(budget).expect("a CRD serializes"),
    ]
    .into_iter()
    .map(|mut value| {
        drop_unknown_formats(&mut value);
        serde_json::from_value(value).expect("a CRD without some formats is still a CRD")
    })
    .collect()
}

/// The CRDs as multi-document YAML: what `worksession crd` prints and `crds/` holds.
pub fn crds_yaml() -> String {
    crds().iter().map(|crd| serde_yaml_ng::to_string(crd).expect("a CRD serializes")).collect::<Vec<_>>().join("---\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crds_carry_only_formats_the_api_server_knows() {
        let yaml = crds_yaml();
        let formats: Vec<&str> = yaml.lines().filter_map(|l| l.trim().strip_prefix("format: ")).collect();
        assert!(!formats.is_empty(), "some formats stay (date-time, int64)");
        for format in formats {
            assert!(KNOWN_FORMATS.contains(&format), "format {format} would warn on every apply");
        }
        assert!(yaml.contains("minimum: 0"), "the bounds of unsigned fields stay");
    }

    #[test]
    fn crd_yaml_has_every_kind_and_the_selectable_fields() {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        let yaml = crds_yaml();
        let docs: Vec<CustomResourceDefinition> =
            yaml.split("\n---\n").map(|doc| serde_yaml_ng::from_str(doc).expect("each document is a CRD")).collect();
        let selectable = |name: &str| -> Vec<String> {
            let crd = docs.iter().find(|c| c.metadata.name.as_deref() == Some(name)).expect(name);
            let fields = crd.spec.versions[0].selectable_fields.clone().unwrap_or_default();
            fields.into_iter().map(|f| f.json_path).collect()
        };
        assert_eq!(docs.len(), 3);
        // The agent's field selectors need these; a printer column with the same path must not satisfy this test.
        assert_eq!(selectable("worksessions.worksession.dev"), [".spec.nodeName"]);
        assert_eq!(selectable("workevents.worksession.dev"), [".spec.session"]);
    }
}
