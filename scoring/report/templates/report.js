document.querySelectorAll('table.sortable').forEach(function(t){
 t.querySelectorAll('thead th').forEach(function(th,i){
  th.tabIndex=0;th.title=(th.title?th.title+' ':'')+'(click to sort)';
  var go=function(){
   var dir=th.getAttribute('aria-sort')==='ascending'?'descending':'ascending';
   t.querySelectorAll('thead th').forEach(function(h){h.removeAttribute('aria-sort');});
   th.setAttribute('aria-sort',dir);
   var key=function(r){var c=r.cells[i];if(!c)return '';var s=c.hasAttribute('data-sort')?c.getAttribute('data-sort'):
    c.textContent.trim();var n=Number(s);return s!==''&&!isNaN(n)?n:s.toLowerCase();};
   var rows=Array.prototype.slice.call(t.tBodies[0].rows);
   rows.sort(function(a,b){var x=key(a),y=key(b),nx=typeof x==='number',ny=typeof y==='number';
    var c=nx&&ny?x-y:nx?-1:ny?1:x<y?-1:x>y?1:0;if(x===''&&y!=='')return 1;if(y===''&&x!=='')return -1;
    return dir==='ascending'?c:-c;});
   rows.forEach(function(r){t.tBodies[0].appendChild(r);});};
  th.addEventListener('click',go);
  th.addEventListener('keydown',function(ev){if(ev.key==='Enter'||ev.key===' '){ev.preventDefault();go();}});
 });
});
document.querySelectorAll('figure .zoom').forEach(function(z){
 var go=function(){z.parentNode.classList.toggle('full');};
 z.addEventListener('click',go);
 z.addEventListener('keydown',function(ev){if(ev.key==='Enter'||ev.key===' '){ev.preventDefault();go();}});
});
