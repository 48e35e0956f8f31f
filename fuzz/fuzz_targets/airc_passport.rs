//! AIRC §12.2 passport renderings: any text is refused or read, never a panic, and what is read
//! renders to a line that reads back the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_proto::airc::passport::Passport;

fuzz_target!(|text: &str| {
    if let Ok(p) = Passport::parse(text) {
        assert_eq!(Passport::parse_line(&p.line()), Ok(p));
    }
});
